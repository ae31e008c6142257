// sim/gpumachine's tailnet seam over a real mesh (src/localmesh/localmesh.h): a simulated machine
// whose payload brings up Tailscale gets a network namespace of its own on the MeshLan, a real
// userspace tailscaled in it, and runs `tailscale up --login-server <headscale> --auth-key <the
// key from its payload> --hostname <its node name>` there — what the join script does on a real
// machine. A key headscale refuses (spent, expired, unknown) fails the seam, so the machine stays
// unjoined (gpumachine reason TailnetJoinFailed), as a real machine without its tailnet would.
//
// Why the kubelet side stays on loopback: the simulated kubelet runs in this process, on the
// host's network, so its Node's InternalIP stays its loopback address (the apiserver reaches the
// kubelet API there); the tailnet address is only ever dialed by tailscaled inside its namespace.
// The claim records the tailnet IP (src/gpu/README.md, "The Node's address").
//
// Used by the GPU mesh tests and `hyperslice dev --example gpu`.
// Thread-safe. Start processes from a long-lived thread (gpumachine calls the seam from its
// fleet's own thread, which lives until Fleet::Stop): see Process in src/localmesh/localmesh.h.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "sim/gpumachine/gpumachine.h"
#include "src/base/log.h"
#include "src/base/result.h"
#include "src/localmesh/localmesh.h"

namespace hyperslice::sim::gpumachine {

class MeshMachines {
 public:
  // `headscale` and `lan` must outlive this; machine state goes under `dir`.
  MeshMachines(std::string bin_dir, const localmesh::Headscale& headscale, localmesh::MeshLan& lan,
               std::string dir)
      : bin_dir_(std::move(bin_dir)), headscale_(headscale), lan_(lan), dir_(std::move(dir)) {}
  ~MeshMachines() {
    std::lock_guard lock(mu_);
    machines_.clear();  // tailscaleds first (they use their namespaces), then the namespaces
  }
  MeshMachines(const MeshMachines&) = delete;
  MeshMachines& operator=(const MeshMachines&) = delete;

  // For Options::tailnet.
  std::function<Status(const market::Instance&, const JoinConfig&)> Seam() {
    return [this](const market::Instance& i, const JoinConfig& c) { return Join(i.id, c); };
  }

  // The machine's `tailscale` CLI output for args (e.g. {"ip", "-4"}); "" when it has none.
  std::string Cli(const std::string& instance_id, const std::vector<std::string>& args) {
    std::lock_guard lock(mu_);
    auto it = machines_.find(instance_id);
    if (it == machines_.end() || !it->second.tailscaled) return {};
    hyperslice::CommandResult r = it->second.tailscaled->Cli(args);
    return r.exit_code == 0 ? r.output : std::string();
  }

  // Instance ids whose `tailscale up` succeeded.
  std::vector<std::string> Joined() {
    std::lock_guard lock(mu_);
    std::vector<std::string> out;
    for (const auto& [id, m] : machines_) {
      if (m.joined) out.push_back(id);
    }
    return out;
  }

 private:
  struct Machine {
    // Declared so that the tailscaled goes before its namespace.
    std::unique_ptr<localmesh::NetNamespace> ns;
    std::unique_ptr<localmesh::Tailscaled> tailscaled;
    bool joined = false;
  };

  Status Join(const std::string& instance_id, const JoinConfig& c) {
    // The machine dials the login server its payload names; inside its namespace only headscale's
    // own URL is served (the relay), so any other would be unreachable for a real machine too.
    if (c.tailnet_login_server != headscale_.url()) {
      return Error::Make(Error::Code::kUnavailable, "the payload's login server \"" +
                                                        c.tailnet_login_server +
                                                        "\" is not the mesh's headscale");
    }
    std::lock_guard lock(mu_);
    Machine& m = machines_[instance_id];
    if (m.joined) return OkStatus();  // booted again (a restart): tailscaled keeps its state
    // Short namespace names, numbered in boot order (interface and namespace names are short).
    std::string name = "m" + std::to_string(machines_.size());
    if (!m.ns) {
      auto ns = lan_.AddMachine(name);
      if (!ns.ok()) return ns.error();
      m.ns = std::move(*ns);
    }
    if (!m.tailscaled) {
      auto ts = localmesh::Tailscaled::Start(bin_dir_, *m.ns, headscale_, dir_ + "/" + name);
      if (!ts.ok()) return ts.error();
      m.tailscaled = std::move(*ts);
    }
    hyperslice::CommandResult up = m.tailscaled->Up(c.tailnet_auth_key, c.node_name, 60);
    if (up.exit_code != 0) {
      // tailscale's answer, with the key cut out should it ever be echoed.
      std::string why = up.errors.empty() ? up.output : up.errors;
      for (size_t at; !c.tailnet_auth_key.empty() &&
                      (at = why.find(c.tailnet_auth_key)) != std::string::npos;) {
        why.replace(at, c.tailnet_auth_key.size(), "<redacted>");
      }
      if (why.size() > 300) why.resize(300);
      return Error::Make(Error::Code::kForbidden,
                         "tailscale up failed (exit " + std::to_string(up.exit_code) + "): " + why);
    }
    m.joined = true;
    log::Info("mesh: machine joined the tailnet",
              {{"instance", instance_id}, {"hostname", c.node_name}});
    return OkStatus();
  }

  std::string bin_dir_;
  const localmesh::Headscale& headscale_;
  localmesh::MeshLan& lan_;
  std::string dir_;
  std::mutex mu_;
  std::map<std::string, Machine> machines_;
};

}  // namespace hyperslice::sim::gpumachine
