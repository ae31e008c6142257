// ObjectSource backed by shared informers: StatefulSets, Jobs and TPUNodeGroups of every namespace
// (and tgp.io GPUNodeClasses and GPUNodePools) are listed and watched once, so admitting a Pod
// reads memory, not the apiserver. Cached objects
// are trimmed to the fields admission reads, which bounds the memory a big cluster's Jobs take.
#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "src/base/log.h"
#include "src/gpu/api.h"
#include "src/kube/client.h"
#include "src/kube/informer.h"
#include "src/kube/store.h"
#include "src/webhook/webhook.h"

namespace hyperslice::webhook {
namespace json = boost::json;
namespace {

// Copies `path` from `from` into `to` when present, creating the objects on the way.
void Keep(const json::object& from, json::object& to, const std::vector<std::string_view>& path) {
  const json::object* src = &from;
  json::object* dst = &to;
  for (size_t i = 0; i < path.size(); ++i) {
    const json::value* v = src->if_contains(path[i]);
    if (v == nullptr) return;
    if (i + 1 == path.size()) {
      (*dst)[path[i]] = *v;
      return;
    }
    if (!v->is_object()) return;
    src = &v->get_object();
    json::value& next = (*dst)[path[i]];
    if (!next.is_object()) next = json::object();
    dst = &next.get_object();
  }
}

// Keeps identity metadata and the listed paths.
void Trim(kube::Object& obj, const std::vector<std::vector<std::string_view>>& paths) {
  json::object out;
  for (std::string_view f : {"name", "namespace", "uid", "resourceVersion", "generation"}) {
    Keep(obj, out, {"metadata", f});
  }
  for (const auto& path : paths) Keep(obj, out, path);
  obj = std::move(out);
}

class InformerObjectSource : public ObjectSource {
 public:
  explicit InformerObjectSource(const std::shared_ptr<kube::Client>& client)
      : live_(NewApiObjectSource(client)), factory_(client) {
    Add(kube::resources::StatefulSets(), [](kube::Object& o) {
      Trim(o, {{"spec", "replicas"}, {"spec", "serviceName"}, {"spec", "ordinals"}});
    });
    Add(kube::resources::Jobs(), [](kube::Object& o) {
      Trim(o, {{"spec", "completions"},
               {"spec", "completionMode"},
               {"spec", "template", "spec", "subdomain"}});
    });
    Add(TPUNodeGroups(), [](kube::Object& o) { Trim(o, {{"spec"}}); });
    // The tgp.io kinds: what /validate-tgp compares (a class's limits and whether it is being
    // deleted; a pool's class and price).
    Add(
        gpu::GPUNodeClasses(),
        [](kube::Object& o) {
          Trim(o, {{"metadata", "deletionTimestamp"}, {"spec", "limits"}});
        },
        /*wait_for_sync=*/false);
    Add(
        gpu::GPUNodePools(),
        [](kube::Object& o) {
          Trim(o, {{"spec", "nodeClassRef"}, {"spec", "maxHourlyPrice"}});
        },
        /*wait_for_sync=*/false);
  }
  ~InformerObjectSource() override { factory_.Shutdown(); }

  void Start(std::chrono::milliseconds sync_timeout) {
    factory_.Start();
    auto deadline = std::chrono::steady_clock::now() + sync_timeout;
    bool synced = true;
    for (const auto& informer : awaited_) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      synced = informer->WaitForCacheSync(std::max(left, std::chrono::milliseconds(0))) && synced;
    }
    if (!synced) {
      // Not fatal: unsynced caches answer kNotCached and admissions read live until they sync
      // (the TPUNodeGroup CRD may simply not be installed yet).
      log::Warn("webhook informers not synced; reading owners live until they are",
                {{"timeout_ms", static_cast<int64_t>(sync_timeout.count())}});
    }
  }

  Result<ObjectPtr> Get(const kube::Resource& r, const std::string& ns, const std::string& name,
                        Mode mode) override {
    if (mode == Mode::kCachedOnly) {
      auto it = informers_.find(r.String());
      if (it != informers_.end() && it->second->HasSynced()) {
        if (kube::ObjectPtr obj = it->second->store().Get(kube::ObjectKey(ns, name))) return obj;
      }
      return Error::Make(Error::Code::kUnavailable, "not in the informer cache", kNotCached);
    }
    return live_->Get(r, ns, name, mode);
  }

  Result<std::vector<ObjectPtr>> List(const kube::Resource& r, Mode mode) override {
    if (mode == Mode::kCachedOnly) {
      auto it = informers_.find(r.String());
      if (it != informers_.end() && it->second->HasSynced()) return it->second->store().List();
      return Error::Make(Error::Code::kUnavailable, "not in the informer cache", kNotCached);
    }
    return live_->List(r, mode);
  }

 private:
  void Add(const kube::Resource& r, std::function<void(kube::Object&)> transform,
           bool wait_for_sync = true) {
    kube::InformerOptions o;
    o.transform = std::move(transform);
    std::shared_ptr<kube::SharedInformer> informer = factory_.For(r, &o);
    informers_[r.String()] = informer;
    if (wait_for_sync) awaited_.push_back(std::move(informer));
  }

  // Live reads (Mode::kLive) go to the API server as NewApiObjectSource reads it.
  std::shared_ptr<ObjectSource> live_;
  kube::InformerFactory factory_;
  std::map<std::string, std::shared_ptr<kube::SharedInformer>> informers_;
  std::vector<std::shared_ptr<kube::SharedInformer>> awaited_;  // by Start(), the Pod path's
};

}  // namespace

std::shared_ptr<ObjectSource> NewInformerObjectSource(const std::shared_ptr<kube::Client>& client,
                                                      std::chrono::milliseconds sync_timeout) {
  auto source = std::make_shared<InformerObjectSource>(client);
  source->Start(sync_timeout);
  return source;
}

}  // namespace hyperslice::webhook
