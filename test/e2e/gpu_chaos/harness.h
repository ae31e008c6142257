// Pieces of the GPU chaos test (chaos_test.cc), also used by the cost e2e test and the
// provisioning benchmark: stand-in machines that register a Node for every running instance, and
// the simulators' own view of which claim each instance belongs to (read from the simulators,
// never from the operator's clients). `hyperslice operator --gpu` runs as a
// testenv::ChildProcess, the simulators' endpoints are reached with testenv::SimHttp.
// Header-only; errors are returned as values or strings (no gtest dependency).
#pragma once

#include <cctype>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <boost/json.hpp>

#include "sim/market/market.h"
#include "sim/market/simulator.h"
#include "src/base/json.h"
#include "src/gpu/api.h"
#include "src/gpu/claim_controller.h"
#include "src/gpu/planner.h"
#include "src/gpu/provider.h"
#include "src/kube/client.h"
#include "src/kube/object_helpers.h"
#include "test/testenv/child_process.h"
#include "test/testenv/eventually.h"
#include "test/testenv/sim_http.h"
#include "test/testenv/stand_in_node.h"
#include "test/testenv/testenv.h"
#include "test/testenv/tgp.h"

namespace hyperslice::gpu::chaos {

namespace bj = boost::json;
namespace market = sim::market;
using namespace std::chrono_literals;

// "%2F" and ":2f" style escapes back to bytes (`escape` is '%' or ':'); an invalid escape is
// kept as it is.
inline std::string Unescape(std::string_view s, char escape) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == escape && i + 2 < s.size() && std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
      out += static_cast<char>(std::stoi(std::string(s.substr(i + 1, 2)), nullptr, 16));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

// One instance as the simulator holds it, with the claim it belongs to by its tags.
struct SimInstance {
  std::string provider;
  std::string id;
  std::string name;
  std::string claim_uid;  // the tgp.io/claim-uid tag; "" when the simulator shows none
  std::string cluster;    // the tgp.io/cluster tag
  bool live = false;      // not stopping or terminated
  market::State state = market::State::kPending;
};

// Reads instances and their tags from one simulator: Lambda stores the launch's tags with the
// instance (keys escaped as the Lambda client must send them, ":2f" for "/"); Paperspace has no
// machine tags, so the tags are the name of the machine's startup script ("hyperslice:k=v,...",
// percent-encoded), read through the simulator's own /v1/startup-scripts.
class SimView {
 public:
  SimView(std::string provider, market::MarketSimulator* sim)
      : provider_(std::move(provider)), sim_(sim), api_(sim->api_endpoint(), "sim-key") {}

  const std::string& provider() const { return provider_; }
  market::MarketSimulator& sim() { return *sim_; }

  // Every instance the market ever held (terminated ones too). Tags seen once are remembered
  // (a Paperspace script goes with its machine).
  Result<std::vector<SimInstance>> Instances() {
    std::map<std::string, std::map<std::string, std::string>> script_tags;  // machine id -> tags
    if (provider_ == kPaperspace) {
      std::string after;
      for (int page = 0; page < 100; ++page) {
        std::string target = "/v1/startup-scripts?limit=120";
        if (!after.empty()) target += "&after=" + after;
        HS_ASSIGN_OR_RETURN(bj::value v, api_.Call("GET", target));
        const bj::object* o = v.if_object();
        const bj::array* items = o ? jsonfield::ArrayField(*o, "items") : nullptr;
        if (items == nullptr) return Error::Make(Error::Code::kInternal, "scripts: no items");
        for (const bj::value& s : *items) {
          if (!s.is_object()) continue;
          std::string name(jsonfield::StringField(s.get_object(), "name"));
          if (name.rfind("hyperslice:", 0) != 0) continue;
          std::map<std::string, std::string> tags;
          std::string body = name.substr(11);
          size_t start = 0;
          while (start <= body.size()) {
            size_t comma = body.find(',', start);
            std::string kv =
                body.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
            if (size_t eq = kv.find('='); eq != std::string::npos) {
              tags[Unescape(kv.substr(0, eq), '%')] = Unescape(kv.substr(eq + 1), '%');
            }
            if (comma == std::string::npos) break;
            start = comma + 1;
          }
          if (const bj::array* ids = jsonfield::ArrayField(s.get_object(), "assignedMachineIds")) {
            for (const bj::value& id : *ids) {
              if (id.is_string()) script_tags[std::string(id.get_string())] = tags;
            }
          }
        }
        const bj::value* next = o->if_contains("nextPage");
        if (next == nullptr || !next->is_string()) break;
        after = std::string(next->get_string());
      }
    }
    std::vector<SimInstance> out;
    std::lock_guard lock(mu_);
    for (const market::Instance& i : sim_->market().List("")) {
      std::map<std::string, std::string> tags;
      if (provider_ == kPaperspace) {
        if (auto it = script_tags.find(i.id); it != script_tags.end()) tags = it->second;
      } else {
        for (const auto& [k, v] : i.tags) tags[Unescape(k, ':')] = v;
      }
      auto& known = tags_[i.id];
      if (!tags.empty()) known = tags;
      SimInstance s;
      s.provider = provider_;
      s.id = i.id;
      s.name = i.name;
      s.state = i.state;
      s.live = i.state != market::State::kTerminated && i.state != market::State::kStopping;
      if (auto u = known.find(kTagClaimUid); u != known.end()) s.claim_uid = u->second;
      if (auto c = known.find(kTagCluster); c != known.end()) s.cluster = c->second;
      out.push_back(std::move(s));
    }
    return out;
  }

 private:
  std::string provider_;
  market::MarketSimulator* sim_;
  testenv::SimHttp api_;
  std::mutex mu_;
  std::map<std::string, std::map<std::string, std::string>> tags_;  // instance id -> last tags
};

// Stand-in machines: every instance that turns running registers a Node with the claim's
// providerID (with the registration taint), Ready with its GPUs allocatable — what issue 3/4's
// machines do after booting — and the not-ready taint the apiserver put on it is removed (the
// node lifecycle controller's job; kube-controller-manager does not run here).
class StandInNodes {
 public:
  explicit StandInNodes(std::shared_ptr<kube::Client> client) : client_(std::move(client)) {}
  ~StandInNodes() { Stop(); }

  void Watch(const std::string& provider, market::Market& m) {
    uint64_t id = m.Subscribe([this, provider](const market::Instance& i) {
      if (i.state != market::State::kRunning) return;
      std::lock_guard lock(mu_);
      if (stop_ || !registered_.insert(provider + "/" + i.id).second) return;
      threads_.emplace_back([this, provider, i] { Register(provider, i); });
    });
    subs_.emplace_back(&m, id);
  }
  void Stop() {
    for (auto& [m, id] : subs_) m->Unsubscribe(id);
    subs_.clear();
    std::vector<std::thread> threads;
    {
      std::lock_guard lock(mu_);
      stop_ = true;
      threads.swap(threads_);
    }
    for (auto& t : threads) t.join();
  }

 private:
  void Register(const std::string& provider, const market::Instance& i) {
    std::string name = (provider == kLambda ? "ll-" : "ps-") + i.id;
    for (char& c : name) {
      auto u = static_cast<unsigned char>(c);
      c = std::isalnum(u) != 0 ? static_cast<char>(std::tolower(u)) : '-';
    }
    bj::object node = testenv::StandInNode(name, provider + "://" + i.id);
    if (!testenv::Eventually(
            [&] {
              auto c = client_->Create(kube::resources::Nodes(), "", node);
              return c.ok() || c.error().code == Error::Code::kAlreadyExists;
            },
            30s, 200ms)) {
      return;
    }
    (void)testenv::Eventually(
        [&] { return testenv::PostStandInNodeStatus(*client_, name, i.listing.gpu_count).ok(); },
        30s, 200ms);
    (void)testenv::Eventually([&] { return testenv::DropNotReadyTaint(*client_, name); }, 30s,
                              100ms);
  }

  std::shared_ptr<kube::Client> client_;
  std::vector<std::pair<market::Market*, uint64_t>> subs_;
  std::mutex mu_;
  bool stop_ = false;
  std::set<std::string> registered_;
  std::vector<std::thread> threads_;
};

// The flags every `hyperslice operator --gpu` of these tests runs with: the shared cluster, no
// leader election, the Lambda and Paperspace simulators as the providers' endpoints, and the
// endpoint machines would join at (boot payloads need one; the stand-in machines register Nodes
// themselves). The TPU controllers always run too: they get a GCE token file in `dir` and a closed
// loopback port as their endpoint (nothing here calls GCE: no TPU groups, orphan sweep off).
// `extra` flags follow.
inline std::vector<std::string> GpuOperatorArgs(const std::string& binary,
                                                const std::filesystem::path& dir,
                                                const std::string& lambda_endpoint,
                                                const std::string& paperspace_endpoint,
                                                const std::vector<std::string>& extra) {
  std::ofstream(dir / "gce-token") << "unused\n";
  std::vector<std::string> args = {
      binary,
      "operator",
      "--gpu",
      "--kubeconfig=" + testenv::Cluster().kubeconfig_path(),
      "--leader-elect=false",
      "--gce-endpoint=http://127.0.0.1:9",
      "--gce-access-token-file=" + (dir / "gce-token").string(),
      "--orphan-sweep-interval=0",
      "--drift-check-interval=1h",
      "--device-plugin-namespace=tgp-system",
      "--gpu-endpoint=lambdalabs=" + lambda_endpoint,
      "--gpu-endpoint=paperspace=" + paperspace_endpoint,
      "--gpu-control-plane-endpoint=" + testenv::Cluster().server_url()};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// The CRDs `hyperslice operator --gpu` watches: tgp.io's, and the TPU operator's (its TPU
// controllers always run too).
inline Status InstallOperatorCrds() {
  HS_RETURN_IF_ERROR(testenv::InstallTgpCrds(HS_DEPLOY_DIR));
  return testenv::InstallTpuCrds(HS_DEPLOY_DIR);
}

// Starts `op` and waits until GPUNodeClass `class_name` has both providers ready; an error with
// the log's tail when the operator exits or `timeout` passes first.
inline Status StartGpuOperator(testenv::ChildProcess& op, kube::Client& client,
                               const std::string& class_name, std::chrono::milliseconds timeout) {
  op.Start();
  bool ready = testenv::Eventually(
      [&] {
        if (!op.Alive()) return true;  // fails below, at once
        auto c = client.Get(GPUNodeClasses(), "", class_name);
        return c.ok() && testenv::Str(*c, "status", "providersReady") == "2/2";
      },
      timeout);
  if (!op.Alive()) return Error::Make(Error::Code::kInternal, "the operator exited:\n" + op.Tail());
  if (!ready) return Error::Make(Error::Code::kTimeout, "providers not ready:\n" + op.Tail());
  return OkStatus();
}

// A market simulator's control endpoint: inject faults into `method` ("launch", "*"), clear them.
inline Status Fault(market::MarketSimulator& sim, const std::string& method,
                    const std::string& kind, double rate) {
  testenv::SimHttp control(sim.control_endpoint());
  bj::object body{{"method", method}, {"kind", kind}, {"rate", rate}};
  auto r = control.Call("POST", "/control/faults", &body);
  return r.ok() ? OkStatus() : Status(r.error());
}
inline Status ClearFaults(market::MarketSimulator& sim) {
  testenv::SimHttp control(sim.control_endpoint());
  auto r = control.Call("DELETE", "/control/faults");
  return r.ok() ? OkStatus() : Status(r.error());
}

// Seed 002's GPU pod (deploy/examples), pinned to one provider's machines instead of the pool's
// GPU type.
inline bj::object PinnedGpuPod(const std::string& name, const std::string& provider) {
  bj::object pod = testenv::SeedGpuPod(HS_DEPLOY_DIR, name);
  pod["spec"].as_object()["nodeSelector"] = bj::object{{kLabelProvider, provider}};
  return pod;
}

// A GPUNodeClass renting from the Lambda simulator first and Paperspace second, both with the
// simulators' key in Secret tgp-system/<secret> (key "key"), and Lambda's one SSH key.
inline bj::object SimClass(const std::string& name, const std::string& secret) {
  bj::object creds{{"name", secret}, {"key", "key"}};
  return bj::object{
      {"apiVersion", "tgp.io/v1"},
      {"kind", "GPUNodeClass"},
      {"metadata", bj::object{{"name", name}}},
      {"spec",
       bj::object{{"providers", bj::array{bj::object{{"name", kLambda},
                                                     {"priority", 1},
                                                     {"credentialsRef", creds},
                                                     {"sshKeyNames", bj::array{"sim-ssh-key"}}},
                                          bj::object{{"name", kPaperspace},
                                                     {"priority", 2},
                                                     {"credentialsRef", creds}}}}}}};
}

// A GPUNodePool of class `class_name` for machines of either simulator.
inline bj::object SimPool(const std::string& ns, const std::string& name,
                          const std::string& class_name) {
  bj::object requirement{
      {"key", kLabelProvider}, {"operator", "In"}, {"values", bj::array{kLambda, kPaperspace}}};
  return bj::object{
      {"apiVersion", "tgp.io/v1"},
      {"kind", "GPUNodePool"},
      {"metadata", bj::object{{"name", name}, {"namespace", ns}}},
      {"spec",
       bj::object{{"nodeClassRef", bj::object{{"kind", "GPUNodeClass"}, {"name", class_name}}},
                  {"template",
                   bj::object{{"spec", bj::object{{"requirements", bj::array{requirement}}}}}}}}};
}

}  // namespace hyperslice::gpu::chaos
