// The pods' network on one runner, as the CNI bridge plugin with host-local IPAM makes it: a
// bridge in the agent's own network namespace holding the CIDR's first address (the pods'
// gateway), one veth pair per pod (host end on the bridge, `eth0` in the pod's namespace) with
// an address from the CIDR and a default route via the bridge.
//
// IPAM lives in the pods' state dirs: a pod's address is the file `<pod dir>/ip`, written before
// it is configured and removed with the directory, so a restarted agent (which scans them) keeps
// every pod's address and never hands one out twice.
//
// Thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "src/base/result.h"

namespace hyperslice::runners::agent {

struct PodNetworkOptions {
  std::string cidr;              // IPv4 "a.b.c.d/n", n <= 30
  std::string bridge = "hs0";    // created when missing, kept when the agent stops
  std::string pods_dir;          // <state-dir>/pods: scanned for the addresses in use
  std::string ip_binary = "ip";  // iproute2
};

class PodNetwork {
 public:
  // Errors: kInvalidArgument (cidr, bridge name).
  static Result<std::unique_ptr<PodNetwork>> Make(PodNetworkOptions options);

  // Gives the pod in network namespace `netns` (whose state is `pod_dir`) its address, veth and
  // route; idempotent (a recovered pod keeps its address). Returns the address.
  Result<std::string> Attach(const std::string& uid, const std::string& netns,
                             const std::string& pod_dir);
  // Removes the pod's host-side veth (its peer goes with it).
  Status Detach(const std::string& uid);
  // The address recorded in `pod_dir`, if any; give it back with Release once the pod dir is
  // gone (before, a restarted agent would still see it taken).
  static std::optional<std::string> AddressOf(const std::string& pod_dir);
  void Release(const std::string& ip);

  // The host end of a pod's veth pair: "hsv" + 8 hex digits of a hash of the uid (IFNAMSIZ).
  static std::string HostVeth(const std::string& uid);
  const std::string& gateway() const { return gateway_; }

 private:
  explicit PodNetwork(PodNetworkOptions options) : o_(std::move(options)) {}
  Status EnsureBridge();
  Result<std::string> Allocate(const std::string& pod_dir);  // mu_ held

  PodNetworkOptions o_;
  uint32_t network_ = 0;  // host order
  int prefix_ = 0;
  std::string gateway_;
  std::mutex mu_;
  std::set<uint32_t> used_;  // host order; the gateway included
};

}  // namespace hyperslice::runners::agent
