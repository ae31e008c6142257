// Negative checks on the work queue (something must NOT happen yet) wait for the queue's own
// signal that it has had its chance, never for a fixed window: after a FakeClock::Advance, until
// its delay thread has looked at the new time (WorkQueue::DelaysCheckedAt); for a call that must
// block, until the thread is blocked in it (WorkQueue::NumBlocked). Waiting for something that
// must happen uses testenv::Eventually (test/testenv/eventually.h).
#pragma once

#include "src/base/fake_clock.h"
#include "src/kube/internal/workqueue.h"
#include "test/testenv/eventually.h"

namespace hyperslice::kube::testing {

// True once `queue`'s delay thread has moved what was due at `clock`'s current time: an item
// still waiting then is not due (a premature move would have happened by now).
inline bool DelaysChecked(const WorkQueue& queue, const FakeClock& clock) {
  const Clock::TimePoint now = clock.Now();
  return testenv::Eventually([&] { return queue.DelaysCheckedAt() >= now; });
}

}  // namespace hyperslice::kube::testing
