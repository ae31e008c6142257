#include "src/runners/agent/podnet.h"

#include <arpa/inet.h>
#include <sys/stat.h>

#include <array>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "src/base/command.h"
#include "src/base/log.h"

namespace hyperslice::runners::agent {
namespace fs = std::filesystem;

namespace {

Error Internal(const std::string& what, const CommandResult& r) {
  return Error::Make(Error::Code::kInternal, what + ": " + r.errors);
}

std::string Dotted(uint32_t host_order) {
  in_addr a{htonl(host_order)};
  std::array<char, INET_ADDRSTRLEN> buf{};
  ::inet_ntop(AF_INET, &a, buf.data(), buf.size());
  return buf.data();
}

std::optional<uint32_t> ParseAddress(const std::string& s) {
  in_addr a{};
  if (::inet_pton(AF_INET, s.c_str(), &a) != 1) return std::nullopt;
  return ntohl(a.s_addr);
}

std::optional<std::string> ReadAddressFile(const std::string& pod_dir) {
  std::ifstream in(pod_dir + "/ip");
  std::string ip;
  if (!(in >> ip) || !ParseAddress(ip)) return std::nullopt;
  return ip;
}

// What iproute2 says when the step was done before (a recovered pod, a restarted agent): "File
// exists", or for an address "Address already assigned".
bool Done(const CommandResult& r) {
  return r.exit_code == 0 || r.errors.find("File exists") != std::string::npos ||
         r.errors.find("already assigned") != std::string::npos;
}

}  // namespace

Result<std::unique_ptr<PodNetwork>> PodNetwork::Make(PodNetworkOptions options) {
  static const std::regex bridge_re("^[A-Za-z0-9_.-]{1,15}$");
  if (!std::regex_match(options.bridge, bridge_re)) {
    return Error::Make(Error::Code::kInvalidArgument,
                       "pod bridge \"" + options.bridge + "\" is not an interface name");
  }
  auto slash = options.cidr.find('/');
  auto base = ParseAddress(options.cidr.substr(0, slash));
  int prefix = -1;
  if (slash != std::string::npos) {
    std::istringstream in(options.cidr.substr(slash + 1));
    if (!(in >> prefix) || !in.eof()) prefix = -1;
  }
  if (!base || prefix < 1 || prefix > 30) {
    return Error::Make(Error::Code::kInvalidArgument,
                       "pod CIDR \"" + options.cidr + "\" is not an IPv4 a.b.c.d/n with n <= 30");
  }
  std::unique_ptr<PodNetwork> net(new PodNetwork(std::move(options)));
  uint32_t mask = ~uint32_t{0} << (32 - prefix);
  net->network_ = *base & mask;
  net->prefix_ = prefix;
  net->gateway_ = Dotted(net->network_ + 1);
  net->used_.insert(net->network_ + 1);
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(net->o_.pods_dir, ec)) {
    if (auto ip = ReadAddressFile(entry.path().string())) net->used_.insert(*ParseAddress(*ip));
  }
  return net;
}

std::string PodNetwork::HostVeth(const std::string& uid) {
  // FNV-1a: stable across agent builds (std::hash is not), so a restarted agent finds the veth.
  uint32_t h = 2166136261u;
  for (unsigned char c : uid) h = (h ^ c) * 16777619u;
  std::array<char, 16> buf{};
  std::snprintf(buf.data(), buf.size(), "hsv%08x", h);
  return buf.data();
}

Status PodNetwork::EnsureBridge() {
  const std::string& br = o_.bridge;
  // Created unconditionally ("File exists" is done) rather than looked up in /sys/class/net: see
  // Attach.
  auto r = RunCommand({o_.ip_binary, "link", "add", br, "type", "bridge"});
  if (!Done(r)) return Internal("cannot create the pod bridge " + br, r);
  r = RunCommand(
      {o_.ip_binary, "addr", "add", gateway_ + "/" + std::to_string(prefix_), "dev", br});
  if (!Done(r)) return Internal("cannot address the pod bridge " + br, r);
  r = RunCommand({o_.ip_binary, "link", "set", br, "up"});
  if (r.exit_code != 0) return Internal("cannot bring up the pod bridge " + br, r);
  return OkStatus();
}

Result<std::string> PodNetwork::Allocate(const std::string& pod_dir) {
  if (auto ip = ReadAddressFile(pod_dir)) {
    used_.insert(*ParseAddress(*ip));
    return *ip;
  }
  uint32_t broadcast = network_ | ~(~uint32_t{0} << (32 - prefix_));
  for (uint32_t a = network_ + 2; a < broadcast; ++a) {
    if (used_.count(a)) continue;
    std::string ip = Dotted(a);
    // Recorded before the pod is configured: an agent that dies in between restarts with it.
    std::string tmp = pod_dir + "/ip.tmp";
    {
      std::ofstream out(tmp, std::ios::trunc);
      out << ip << "\n";
      if (!out) return Error::Make(Error::Code::kInternal, "cannot write " + tmp);
    }
    if (std::rename(tmp.c_str(), (pod_dir + "/ip").c_str()) != 0) {
      return Error::Make(Error::Code::kInternal, "cannot write " + pod_dir + "/ip");
    }
    used_.insert(a);
    return ip;
  }
  return Error::Make(Error::Code::kUnavailable, "pod CIDR " + o_.cidr + " has no free address");
}

Result<std::string> PodNetwork::Attach(const std::string& uid, const std::string& netns,
                                       const std::string& pod_dir) {
  std::string ip;
  {
    std::lock_guard lock(mu_);
    HS_RETURN_IF_ERROR(EnsureBridge());
    HS_ASSIGN_OR_RETURN(ip, Allocate(pod_dir));
  }
  const std::string veth = HostVeth(uid);
  const std::string& ipb = o_.ip_binary;
  // Links are asked of ip (here: created, "File exists" meaning a recovered pod's), never looked
  // up in /sys/class/net: a sysfs mounted in another network namespace (an agent started in a
  // namespace of its own) lists that namespace's links, so a link missing here was skipped when
  // one of its name lived there, and a link present here was not seen.
  auto r = RunCommand(
      {ipb, "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", netns});
  if (!Done(r)) return Internal("cannot create the pod's veth pair", r);
  r = RunCommand({ipb, "link", "set", veth, "master", o_.bridge, "up"});
  if (r.exit_code != 0) return Internal("cannot attach " + veth + " to " + o_.bridge, r);
  r = RunCommand(
      {ipb, "-n", netns, "addr", "add", ip + "/" + std::to_string(prefix_), "dev", "eth0"});
  if (!Done(r)) return Internal("cannot address the pod's eth0", r);
  r = RunCommand({ipb, "-n", netns, "link", "set", "eth0", "up"});
  if (r.exit_code != 0) return Internal("cannot bring up the pod's eth0", r);
  r = RunCommand({ipb, "-n", netns, "route", "replace", "default", "via", gateway_});
  if (r.exit_code != 0) return Internal("cannot route the pod through " + gateway_, r);
  log::Info("pod network attached", {{"uid", uid}, {"ip", ip}, {"veth", veth}});
  return ip;
}

Status PodNetwork::Detach(const std::string& uid) {
  const std::string veth = HostVeth(uid);
  // Asked of ip, not of /sys/class/net (see Attach): the veth was otherwise left to go only with
  // the pod's namespace, asynchronously.
  auto r = RunCommand({o_.ip_binary, "link", "del", veth});
  if (r.exit_code != 0 && r.errors.find("Cannot find device") == std::string::npos) {
    return Internal("cannot delete the pod's veth " + veth, r);
  }
  return OkStatus();
}

std::optional<std::string> PodNetwork::AddressOf(const std::string& pod_dir) {
  return ReadAddressFile(pod_dir);
}

void PodNetwork::Release(const std::string& ip) {
  std::lock_guard lock(mu_);
  if (auto a = ParseAddress(ip)) used_.erase(*a);
}

}  // namespace hyperslice::runners::agent
