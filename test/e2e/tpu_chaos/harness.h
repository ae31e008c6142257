// Shared by the chaos e2e test (test/e2e/tpu_chaos) and the scale benchmark
// (bench/tpu_scale_bench.cc), on the TPU operator's test environment (test/testenv/tpu_env.h):
// the owner of each GCE resource as the simulator shows it, the invariants that must hold at every
// instant and a watch that checks them, slice shapes, and what survives of a deleted group.
// Header-only; no gtest dependency (errors are returned as strings).
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <boost/json.hpp>

#include "src/kube/client.h"
#include "src/kube/object_helpers.h"
#include "src/tpu/api.h"
#include "test/testenv/eventually.h"
#include "test/testenv/operator_process.h"
#include "test/testenv/tpu_env.h"

namespace hyperslice::tpu::chaos {

namespace json = boost::json;
using namespace std::chrono_literals;

// The environment's pieces (Env, GceControl, OperatorProcess, FakeKubelets, zones, group
// helpers) are the chaos test's and the benchmark's vocabulary.
using namespace testenv::tpuenv;  // NOLINT(google-build-using-namespace)
using testenv::Eventually;        // polls a condition until it holds or the timeout passes
using testenv::GceControl;

// The chaos test's and the benchmark's environment: the shared one, its simulator serving with 4
// API threads (many groups and kubelet stand-ins at once).
inline Env& ChaosEnv() {
  sim::gce::Options o = SimOptions();
  o.api_threads = 4;
  return SharedEnv("tpu-chaos", o);
}

// The group uid a GCE resource of ours names: the "uid=<uid>" of the description's owner marker,
// or the hyperslice-group-uid label. "" when none.
inline std::string OwnerUid(const json::object& r) {
  if (const auto* d = r.if_contains("description"); d && d->is_string()) {
    std::string s(d->as_string());
    if (size_t p = s.rfind("uid="); p != std::string::npos) {
      size_t e = s.find(' ', p);
      return s.substr(p + 4, e == std::string::npos ? std::string::npos : e - p - 4);
    }
  }
  const json::object* labels = nullptr;
  if (const auto* l = r.if_contains("labels"); l && l->is_object()) labels = &l->as_object();
  if (const auto* p = r.if_contains("properties"); !labels && p && p->is_object()) {
    if (const auto* l = p->as_object().if_contains("labels"); l && l->is_object()) {
      labels = &l->as_object();
    }
  }
  if (labels) {
    if (const auto* u = labels->if_contains(kGceLabelGroupUid); u && u->is_string()) {
      return std::string(u->as_string());
    }
  }
  return "";
}

inline size_t Count(const json::object& state, const char* kind) {
  const auto* a = state.if_contains(kind);
  return a && a->is_array() ? a->as_array().size() : 0;
}
inline size_t TotalResources(const json::object& state) {
  return Count(state, "resourcePolicies") + Count(state, "instanceTemplates") +
         Count(state, "instanceGroupManagers") + Count(state, "instances");
}
inline std::string DescribeResources(const json::object& state) {
  std::string out;
  for (const char* kind :
       {"resourcePolicies", "instanceTemplates", "instanceGroupManagers", "instances"}) {
    if (const auto* a = state.if_contains(kind); a && a->is_array()) {
      for (const auto& r : a->as_array()) {
        out += std::string(kind) + " " + std::string(r.at("name").as_string()) + " (" +
               OwnerUid(r.as_object()) + ")\n";
      }
    }
  }
  return out;
}
// GCE resources of one group (by owner uid).
inline size_t ResourcesOf(const json::object& state, const std::string& uid) {
  size_t n = 0;
  for (const char* kind :
       {"resourcePolicies", "instanceTemplates", "instanceGroupManagers", "instances"}) {
    if (const auto* a = state.if_contains(kind); a && a->is_array()) {
      for (const auto& r : a->as_array()) n += OwnerUid(r.as_object()) == uid;
    }
  }
  return n;
}

// The invariants that must hold at every instant, checked on one state dump: at most one
// policy/template/MIG per group uid; a BULK MIG holds either none or all of its VMs.
inline std::vector<std::string> CheckInvariants(const json::object& state) {
  std::vector<std::string> bad;
  for (const char* kind : {"resourcePolicies", "instanceTemplates", "instanceGroupManagers"}) {
    std::map<std::string, std::vector<std::string>> by_uid;
    if (const auto* a = state.if_contains(kind); a && a->is_array()) {
      for (const auto& r : a->as_array()) {
        by_uid[OwnerUid(r.as_object())].push_back(std::string(r.at("name").as_string()));
      }
    }
    for (const auto& [uid, names] : by_uid) {
      if (names.size() > 1) {
        std::string s = std::string(kind) + ": " + std::to_string(names.size()) + " for group " +
                        (uid.empty() ? "<no owner>" : uid) + ":";
        for (const auto& n : names) s += " " + n;
        bad.push_back(s);
      }
    }
  }
  std::map<std::string, int64_t> vms_of_mig;
  if (const auto* a = state.if_contains("instances"); a && a->is_array()) {
    for (const auto& i : a->as_array()) {
      if (const auto* m = i.as_object().if_contains("simMig"); m && m->is_string()) {
        ++vms_of_mig[std::string(m->as_string())];
      }
    }
  }
  if (const auto* a = state.if_contains("instanceGroupManagers"); a && a->is_array()) {
    for (const auto& mv : a->as_array()) {
      const json::object& m = mv.as_object();
      const auto* tsp = m.if_contains("targetSizePolicy");
      bool bulk = tsp && tsp->is_object() && tsp->as_object().if_contains("mode") &&
                  tsp->as_object().at("mode") == "BULK";
      if (!bulk) continue;
      std::string zone(m.at("zone").as_string());
      zone = zone.substr(zone.rfind('/') + 1);
      std::string key =
          std::string(kProject) + "/" + zone + "/" + std::string(m.at("name").as_string());
      int64_t target = 0;
      if (const auto* t = m.if_contains("targetSize")) {
        target = t->is_int64()    ? t->as_int64()
                 : t->is_string() ? std::stoll(std::string(t->as_string()))
                                  : 0;
      }
      int64_t have = vms_of_mig.count(key) ? vms_of_mig[key] : 0;
      if (have != 0 && have != target) {
        bad.push_back("BULK MIG " + key + " holds " + std::to_string(have) + " of " +
                      std::to_string(target) + " VMs");
      }
    }
  }
  return bad;
}

// Polls the simulator's state every `every` and records every invariant violation (deduplicated).
class InvariantWatch {
 public:
  InvariantWatch(GceControl& control, std::chrono::milliseconds every = 50ms) : control_(control) {
    thread_ = std::thread([this, every] {
      while (!stop_) {
        json::object st = control_.State();
        ++polls_;
        for (auto& v : CheckInvariants(st)) {
          std::lock_guard lock(mu_);
          violations_.insert(std::move(v));
        }
        std::this_thread::sleep_for(every);
      }
    });
  }
  ~InvariantWatch() { Stop(); }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  std::set<std::string> violations() {
    std::lock_guard lock(mu_);
    return violations_;
  }
  int64_t polls() const { return polls_; }

 private:
  GceControl& control_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> polls_{0};
  std::mutex mu_;
  std::set<std::string> violations_;
  std::thread thread_;
};

// Slice shapes: 1 host (v6e 2x2, SPOT), 2, 4 and 8 hosts (tpu7x 2x2x2 / 2x2x4 / 2x4x4, BULK).
inline json::object Group(const std::string& ns, const std::string& name, int hosts,
                          const std::string& zone_override = "") {
  json::object spec;
  if (hosts == 1) {
    spec = json::object{{"project", kProject},
                        {"nodeLocation", zone_override.empty() ? kV6eZone : zone_override},
                        {"nodeCount", 1},
                        {"topology", "2x2"},
                        {"instanceConfig", json::object{{"machineType", "ct6e-standard-4t"},
                                                        {"provisioningModel", "SPOT"}}}};
  } else {
    spec = json::object{{"project", kProject},
                        {"nodeLocation", zone_override.empty() ? kZone : zone_override},
                        {"nodeCount", hosts},
                        {"topology", hosts == 2   ? "2x2x2"
                                     : hosts == 4 ? "2x2x4"
                                                  : "2x4x4"},
                        {"targetSizePolicyMode", "BULK"},
                        {"instanceConfig", json::object{{"machineType", "tpu7x-standard-4t"},
                                                        {"provisioningModel", "STANDARD"}}}};
  }
  return json::object{{"apiVersion", kApiVersion},
                      {"kind", "TPUNodeGroup"},
                      {"metadata", json::object{{"name", name}, {"namespace", ns}}},
                      {"spec", std::move(spec)}};
}

inline bool IsReady(kube::Client& c, const std::string& ns, const std::string& name) {
  auto g = c.Get(TPUNodeGroups(), ns, name);
  if (!g.ok()) return false;
  auto cond = kube::FindCondition(*g, kCondReady);
  return cond && cond->status == "True" && cond->observed_generation == kube::Generation(*g);
}
// What survives of everything a group owned: the given Nodes, Nodes labelled for the group,
// bootstrap Secrets of its uid, the child CRs, GCE resources carrying its uid. Empty when nothing.
inline std::string Leftovers(Env& env, const std::string& ns, const std::string& name,
                             const std::string& uid, const std::set<std::string>& node_names = {}) {
  std::string out;
  auto& c = *env.client;
  auto nodes = c.List(
      kube::resources::Nodes(), "",
      {.label_selector = std::string(kLabelNodeGroup) + "=" + NodeGroupLabelValue(ns, name)});
  if (nodes.ok() && !nodes->items.empty()) {
    out += std::to_string(nodes->items.size()) + " Node(s) labelled for the group; ";
  }
  for (const auto& n : node_names) {
    if (!IsGone(c, kube::resources::Nodes(), "", n)) out += "Node " + n + "; ";
  }
  auto secrets = c.List(kube::resources::Secrets(), "kube-system",
                        {.label_selector = std::string(kSecretLabelGroupUid) + "=" + uid});
  if (secrets.ok() && !secrets->items.empty()) {
    out += std::to_string(secrets->items.size()) + " bootstrap Secret(s); ";
  }
  for (const auto* r : {&ResourcePolicies(), &InstanceTemplates(), &ManagedInstanceGroups()}) {
    if (!IsGone(c, *r, ns, name)) out += r->kind + " CR; ";
  }
  if (size_t n = ResourcesOf(env.control->State(), uid); n > 0) {
    out += std::to_string(n) + " GCE resource(s); ";
  }
  return out;
}

}  // namespace hyperslice::tpu::chaos
