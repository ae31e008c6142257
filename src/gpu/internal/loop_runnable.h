// LoopRunnable: a kube::Runnable whose work is one background thread, the subclass's Loop, which
// waits on cv_ under mu_ and returns once stop_ is set. The GPU controllers that are not
// work-queue controllers (the provisioner's batcher, the claims' garbage collector, the cost
// collector) share its start and stop instead of each writing them.
//
// A subclass's destructor must call Stop(): Loop uses the subclass's members, which are gone by
// the time ~LoopRunnable runs.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "src/base/result.h"
#include "src/kube/manager.h"

namespace hyperslice::gpu::internal {

class LoopRunnable : public kube::Runnable {
 public:
  Status Start() override {
    thread_ = std::thread([this] { Loop(); });
    return OkStatus();
  }
  // Sets stop_, wakes Loop and joins it; idempotent. The grace is not needed: Loop returns as
  // soon as it is woken.
  void Stop(std::chrono::milliseconds /*grace*/) final {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 protected:
  // Runs on the thread until stop_ (read under mu_) is set.
  virtual void Loop() = 0;

  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // guarded by mu_

 private:
  std::thread thread_;
};

}  // namespace hyperslice::gpu::internal
