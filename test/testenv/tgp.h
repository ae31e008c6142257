// Set-up shared by the tests of the ephemeral-GPU controllers (src/gpu): the tgp.io CRDs from a
// deploy/ folder, a provider-credentials Secret where seed 002 puts it, seed 002's class, pool and
// GPU pod read from deploy/examples (not pasted into each test), and the clean-up every GPU test
// does. Header-only, so hs_testenv itself does not depend on hs_gpu.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <yaml-cpp/yaml.h>

#include <boost/json.hpp>

#include "src/base/json.h"
#include "src/gpu/api.h"
#include "src/gpu/claim_controller.h"
#include "src/gpu/class_controller.h"
#include "src/gpu/offer_cache.h"
#include "src/gpu/providers.h"
#include "src/gpu/provisioner.h"
#include "src/gpu/unavailable_offers.h"
#include "src/kube/client.h"
#include "src/kube/events.h"
#include "src/kube/manager.h"
#include "src/kube/metrics.h"
#include "src/kube/object_helpers.h"
#include "src/kube/yaml.h"
#include "test/testenv/crds.h"
#include "test/testenv/eventually.h"
#include "test/testenv/testenv.h"

namespace hyperslice::testenv {

// Installs deploy/crds/tgp.io_{gpunodeclasses,gpunodepools,gpunodeclaims}.yaml and waits until
// they are served.
inline Status InstallTgpCrds(const std::string& deploy_dir) {
  return InstallCrds({deploy_dir + "/crds/tgp.io_gpunodeclasses.yaml",
                      deploy_dir + "/crds/tgp.io_gpunodepools.yaml",
                      deploy_dir + "/crds/tgp.io_gpunodeclaims.yaml"},
                     {gpu::GPUNodeClasses(), gpu::GPUNodePools(), gpu::GPUNodeClaims()});
}

// Creates namespace `ns` (if missing) and Secret `name` there with `string_data`; an existing
// Secret of that name is replaced.
inline Status PutSecret(kube::Client& client, const std::string& ns, const std::string& name,
                        const std::map<std::string, std::string>& string_data) {
  namespace bj = boost::json;
  auto created_ns = client.Create(
      kube::resources::Namespaces(), "",
      bj::object{{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", ns}}}});
  if (!created_ns.ok() && created_ns.error().code != Error::Code::kAlreadyExists) {
    return created_ns.error();
  }
  bj::object data;
  for (const auto& [k, v] : string_data) data[k] = v;
  bj::object secret{{"apiVersion", "v1"},
                    {"kind", "Secret"},
                    {"metadata", {{"name", name}, {"namespace", ns}}},
                    {"stringData", std::move(data)}};
  (void)client.Delete(kube::resources::Secrets(), ns, name);
  auto created = client.Create(kube::resources::Secrets(), ns, secret);
  if (!created.ok()) return created.error();
  return OkStatus();
}

// The shared cluster as GPU provisioning tests need it: with kube-scheduler, whose
// PodScheduled=False/Unschedulable on a pod is what starts provisioning.
inline void ConfigureSchedulingCluster() {
  localcluster::Options o;
  o.scheduler = true;
  ConfigureCluster(o);
}

// Seed 002's tgp-operator-secret in tgp-system for providers on simulators: the RunPod and Lambda
// API keys the simulators' account answers to ("sim-key"), and `extra` entries.
inline Status PutSimOperatorSecret(kube::Client& client,
                                   std::map<std::string, std::string> extra = {}) {
  extra.emplace("RUNPOD_API_KEY", "sim-key");
  extra.emplace("LAMBDA_LABS_API_KEY", "sim-key");
  return PutSecret(client, "tgp-system", "tgp-operator-secret", extra);
}

// What `hyperslice operator --gpu` shares between its GPU controllers (src/cmd/roles_operator.cc),
// for tests that run them in process: one manager, offer cache, memory of unavailable offers
// (3 min) and event recorder ("hyperslice-gpu").
struct GpuControllerKit {
  std::shared_ptr<kube::Client> client;
  std::unique_ptr<kube::Manager> manager;
  std::shared_ptr<gpu::OfferCache> cache;
  std::shared_ptr<gpu::UnavailableOffers> unavailable;
  std::shared_ptr<kube::EventRecorder> events;

  // The class controller's options for providers on simulators: offers refreshed every 2 s,
  // `endpoints` as the operator's --gpu-endpoint defaults (seed 002's class names none), and the
  // provider clients told a 50 requests/s limit (the simulators enforce the real providers'
  // limits; a test should not wait on them).
  gpu::ClassControllerOptions ClassOptions(std::map<std::string, std::string> endpoints) const {
    gpu::ClassControllerOptions co;
    co.client = client;
    co.cache = cache;
    co.events = events;
    co.offer_refresh_interval = std::chrono::seconds(2);
    co.factory = [](const gpu::ProviderConfig& c) {
      gpu::ProviderConfig x = c;
      x.requests_per_second = 50;
      x.burst = 50;
      return gpu::NewProvider(x);
    };
    co.default_endpoints = std::move(endpoints);
    return co;
  }
  // The claim controller's shared parts (client, cache, unavailable offers, events).
  gpu::ClaimControllerOptions ClaimOptions() const { return Shared<gpu::ClaimControllerOptions>(); }
  // The provisioner's, with pool statuses refreshed every second (tests read them).
  gpu::ProvisionerOptions ProvisionerOptions() const {
    auto po = Shared<gpu::ProvisionerOptions>();
    po.status_interval = std::chrono::seconds(1);
    return po;
  }

 private:
  // Options of a controller that plans launches: the four parts it shares with the others.
  template <class Options>
  Options Shared() const {
    Options o;
    o.client = client;
    o.cache = cache;
    o.unavailable = unavailable;
    o.events = events;
    return o;
  }
};

inline Result<GpuControllerKit> NewGpuControllerKit(const std::shared_ptr<kube::Client>& client,
                                                    kube::metrics::Registry* registry) {
  kube::ManagerOptions mo;
  mo.client = client;
  mo.registry = registry;
  auto m = kube::Manager::Create(std::move(mo));
  if (!m.ok()) return m.error();
  GpuControllerKit kit;
  kit.client = client;
  kit.manager = std::move(*m);
  kit.cache = std::make_shared<gpu::OfferCache>();
  kit.unavailable = std::make_shared<gpu::UnavailableOffers>(std::chrono::minutes(3));
  kube::EventRecorderOptions eo;
  eo.component = "hyperslice-gpu";
  kit.events = std::make_shared<kube::EventRecorder>(client, eo);
  return kit;
}

// The string `key` of the object at dotted path `at` in `o` (`o` itself for ""), or "".
inline std::string Str(const boost::json::object& o, std::string_view at, std::string_view key) {
  const boost::json::object* obj = at.empty() ? &o : jsonfield::ObjectAt(o, at);
  return obj != nullptr ? std::string(jsonfield::StringField(*obj, key)) : std::string();
}

// Every Event of the cluster, one "event: <object> <reason>: <message>" line each, for a failed
// wait's message.
inline std::string DescribeEvents(kube::Client& client) {
  std::string out;
  auto events = client.List(kube::resources::Events(), "");
  if (!events.ok()) return out;
  for (const auto& e : events->items) {
    out += "event: " + Str(e, "involvedObject", "name") + " " + Str(e, "", "reason") + ": " +
           Str(e, "", "message") + "\n";
  }
  return out;
}

// Every GPUNodeClaim; none when the list fails.
inline std::vector<boost::json::object> ListClaims(kube::Client& client) {
  auto l = client.List(gpu::GPUNodeClaims(), "");
  return l.ok() ? l->items : std::vector<boost::json::object>{};
}

// Deletes every Pod of `ns` at once (grace period 0), without waiting.
inline void DeletePodsNow(kube::Client& client, const std::string& ns) {
  auto pods = client.List(kube::resources::Pods(), ns);
  if (!pods.ok()) return;
  for (const auto& p : pods->items) {
    kube::DeleteOptions d;
    d.grace_period_seconds = 0;
    (void)client.Delete(kube::resources::Pods(), ns, Str(p, "metadata", "name"), d);
  }
}

// Deletes every Node (the machines a test joined), without waiting.
inline void DeleteNodes(kube::Client& client) {
  auto nodes = client.List(kube::resources::Nodes(), "");
  if (!nodes.ok()) return;
  for (const auto& n : nodes->items) {
    (void)client.Delete(kube::resources::Nodes(), "", Str(n, "metadata", "name"));
  }
}

// A manifest of `deploy_dir`/examples as an object.
inline boost::json::object ExampleObject(const std::string& deploy_dir, const std::string& file) {
  return kube::YamlToJson(YAML::LoadFile(deploy_dir + "/examples/" + file)).as_object();
}

// Seed 002's GPUNodeClass and GPUNodePool as deploy/examples ships them.
inline boost::json::object SeedGpuClass(const std::string& deploy_dir) {
  return ExampleObject(deploy_dir, "gpunodeclass.yaml");
}
inline boost::json::object SeedGpuPool(const std::string& deploy_dir) {
  return ExampleObject(deploy_dir, "gpunodepool.yaml");
}

// Creates `cls` (seed 002's class, perhaps with a test's additions) and `pool`, and waits until the
// class is Ready.
inline Status CreateGpuClassAndPool(kube::Client& client, const boost::json::object& cls,
                                    const boost::json::object& pool,
                                    std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  auto created = client.Create(gpu::GPUNodeClasses(), "", cls);
  if (!created.ok()) return created.error();
  std::string ns = Str(pool, "metadata", "namespace");
  auto pooled = client.Create(gpu::GPUNodePools(), ns.empty() ? "default" : ns, pool);
  if (!pooled.ok()) return pooled.error();
  std::string name = Str(cls, "metadata", "name");
  if (!Eventually(
          [&] {
            auto c = client.Get(gpu::GPUNodeClasses(), "", name);
            return c.ok() && kube::IsConditionTrue(*c, "Ready");
          },
          timeout)) {
    return Error::Make(Error::Code::kTimeout, "GPUNodeClass " + name + " not Ready");
  }
  return OkStatus();
}

// Takes down what CreateGpuClassAndPool made, in the order that returns every machine: the pool
// (nothing more is planned), every claim (their finalizers return the machines), then the class;
// waits for each to go. An error names the first that did not.
inline Status DeleteGpuClassAndPool(kube::Client& client, const std::string& pool_ns,
                                    const std::string& pool, const std::string& cls) {
  (void)client.Delete(gpu::GPUNodePools(), pool_ns, pool);
  if (!Eventually([&] { return !client.Get(gpu::GPUNodePools(), pool_ns, pool).ok(); })) {
    return Error::Make(Error::Code::kTimeout, "GPUNodePool " + pool + " still there");
  }
  for (const auto& c : ListClaims(client)) {
    (void)client.Delete(gpu::GPUNodeClaims(), "", Str(c, "metadata", "name"));
  }
  if (!Eventually([&] { return ListClaims(client).empty(); })) {
    return Error::Make(Error::Code::kTimeout, "GPUNodeClaims still there");
  }
  (void)client.Delete(gpu::GPUNodeClasses(), "", cls);
  if (!Eventually([&] { return !client.Get(gpu::GPUNodeClasses(), "", cls).ok(); })) {
    return Error::Make(Error::Code::kTimeout, "GPUNodeClass " + cls + " still there");
  }
  return OkStatus();
}

// A Pod asking for one GPU the way seed 002's Job does: the pod template of
// deploy/examples/gpu-job.yaml (the pool's toleration and tgp.io/gpu-type selector, the CUDA image,
// one nvidia.com/gpu), without the Job's command and restart policy, so it runs until deleted.
inline boost::json::object SeedGpuPod(const std::string& deploy_dir, const std::string& name,
                                      const std::string& ns = "default") {
  boost::json::object job = ExampleObject(deploy_dir, "gpu-job.yaml");
  boost::json::object spec = job.at("spec").at("template").at("spec").as_object();
  spec.erase("restartPolicy");
  for (auto& c : spec.at("containers").as_array()) c.as_object().erase("command");
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata", {{"name", name}, {"namespace", ns}}},
          {"spec", std::move(spec)}};
}

}  // namespace hyperslice::testenv
