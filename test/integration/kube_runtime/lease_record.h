// The Lease as the apiserver has it, for the leader election and Manager tests: its holder and
// renewTime, and a wait counted in the holder's renewals. A negative check ("the standby did not
// take over") is measured in the electors' own rounds (each renewal is one retry period of the
// leader, and a standby tries once per retry period too), not in a fixed wall-clock window that a
// slow machine could fill with fewer rounds.
#pragma once

#include <chrono>
#include <string>
#include <utility>

#include "src/kube/resource.h"
#include "test/testenv/eventually.h"
#include "test/testenv/testenv.h"

namespace hyperslice::kube {

// The Lease's holderIdentity and renewTime in the calling test's namespace ("" when it cannot be
// read).
inline std::pair<std::string, std::string> LeaseRecord(const std::string& lease) {
  auto l = testenv::AdminClient()->Get(resources::Leases(), testenv::TestNamespace(), lease);
  if (!l.ok()) return {};
  const auto* spec = l->if_contains("spec");
  if (spec == nullptr || !spec->is_object()) return {};
  auto field = [&](const char* k) {
    const auto* v = spec->as_object().if_contains(k);
    return v != nullptr && v->is_string() ? std::string(v->as_string()) : std::string();
  };
  return {field("holderIdentity"), field("renewTime")};
}

// Waits until `holder` has renewed `lease` `n` more times; false when another holds it or the
// renewals stop.
inline bool WaitForRenewals(const std::string& lease, const std::string& holder, int n) {
  auto start = LeaseRecord(lease);
  if (start.first != holder) return false;
  std::string last = start.second;
  int seen = 0;
  return testenv::Eventually(
      [&] {
        auto [h, renew] = LeaseRecord(lease);
        if (h != holder) return false;
        if (renew != last) {
          last = renew;
          ++seen;
        }
        return seen >= n;
      },
      std::chrono::milliseconds(20000), std::chrono::milliseconds(50));
}

}  // namespace hyperslice::kube
