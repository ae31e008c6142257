// ObjectSource backed by shared informers: StatefulSets, Jobs and TPUNodeGroups of every namespace
// are listed and watched once, so admitting a Pod reads memory, not the apiserver. Cached objects
// are trimmed to the fields admission reads, which bounds the memory a big cluster's Jobs take.
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "src/base/log.h"
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
  explicit InformerObjectSource(std::shared_ptr<kube::Client> client)
      : client_(client), factory_(client) {
    Add(kube::resources::StatefulSets(), [](kube::Object& o) {
      Trim(o, {{"spec", "replicas"}, {"spec", "serviceName"}, {"spec", "ordinals"}});
    });
    Add(kube::resources::Jobs(), [](kube::Object& o) {
      Trim(o, {{"spec", "completions"},
               {"spec", "completionMode"},
               {"spec", "template", "spec", "subdomain"}});
    });
    Add(TPUNodeGroups(), [](kube::Object& o) { Trim(o, {{"spec"}}); });
  }
  ~InformerObjectSource() override { factory_.Shutdown(); }

  void Start(std::chrono::milliseconds sync_timeout) {
    factory_.Start();
    if (!factory_.WaitForCacheSync(sync_timeout)) {
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
    HS_ASSIGN_OR_RETURN(kube::Object obj, client_->Get(r, ns, name));
    return std::make_shared<const json::object>(std::move(obj));
  }

 private:
  void Add(const kube::Resource& r, std::function<void(kube::Object&)> transform) {
    kube::InformerOptions o;
    o.transform = std::move(transform);
    informers_[r.String()] = factory_.For(r, &o);
  }

  std::shared_ptr<kube::Client> client_;
  kube::InformerFactory factory_;
  std::map<std::string, std::shared_ptr<kube::SharedInformer>> informers_;
};

}  // namespace

std::shared_ptr<ObjectSource> NewInformerObjectSource(std::shared_ptr<kube::Client> client,
                                                      std::chrono::milliseconds sync_timeout) {
  auto source = std::make_shared<InformerObjectSource>(std::move(client));
  source->Start(sync_timeout);
  return source;
}

}  // namespace hyperslice::webhook
