#include "src/kube/informer.h"

#include <exception>
#include <utility>

#include "src/base/log.h"
#include "src/kube/internal/informer_object.h"

namespace hyperslice::kube {

class SharedInformer::Sink final : public ReflectorSink {
 public:
  explicit Sink(SharedInformer* informer) : informer_(informer) {}
  ObjectPtr Convert(Object object) override { return informer_->Prepare(std::move(object)); }
  void Replace(std::vector<ObjectPtr> items, const std::string& /*resource_version*/) override {
    informer_->OnReplace(std::move(items));
  }
  void Apply(WatchEvent::Type type, Object object) override {
    informer_->OnEvent(type, std::move(object));
  }

 private:
  SharedInformer* informer_;
};

SharedInformer::SharedInformer(std::shared_ptr<Client> client, Resource resource,
                               InformerOptions options)
    : client_(std::move(client)), resource_(std::move(resource)), options_(std::move(options)) {
  ReflectorOptions ro = options_.reflector;
  ro.ns = options_.ns;
  ro.label_selector = options_.label_selector;
  ro.field_selector = options_.field_selector;
  if (ro.name.empty()) {
    ro.name = resource_.String();
    if (!options_.ns.empty()) ro.name += "/" + options_.ns;
    if (!options_.label_selector.empty()) ro.name += "?" + options_.label_selector;
  }
  sink_ = std::make_unique<Sink>(this);
  reflector_ = std::make_unique<Reflector>(client_, resource_, std::move(ro), sink_.get());
}

SharedInformer::~SharedInformer() { Stop(); }

EventHandler OnEachObject(const std::function<void(const ObjectPtr&)>& fn) {
  return {.on_add = fn,
          .on_update = [fn](const ObjectPtr&, const ObjectPtr& cur) { fn(cur); },
          .on_delete = [fn](const ObjectPtr& last, bool) { fn(last); }};
}

SharedInformer::HandlerId SharedInformer::AddEventHandler(EventHandler handler) {
  auto shared = std::make_shared<EventHandler>(std::move(handler));
  std::lock_guard apply(apply_mu_);
  std::vector<Notification> initial;
  HandlerId id = 0;
  {
    std::lock_guard lock(mu_);
    id = next_handler_++;
    handlers_[id] = Registered{shared, next_seq_ - 1};
    if (!started_) return id;
  }
  // Started: the cache content is what this handler has not seen yet; everything queued before
  // now is already reflected in it (apply_mu_ orders cache writes and enqueues).
  for (auto& obj : store_.List()) {
    Notification n;
    n.kind = Notification::Kind::kAdd;
    n.cur = std::move(obj);
    n.target = id;
    initial.push_back(std::move(n));
  }
  Enqueue(std::move(initial));
  return id;
}

void SharedInformer::RemoveEventHandler(HandlerId id) {
  std::lock_guard lock(mu_);
  handlers_.erase(id);
}

Status SharedInformer::AddIndex(const std::string& name, IndexFunc fn) {
  {
    std::lock_guard lock(mu_);
    if (started_) {
      return Error::Make(Error::Code::kInvalidArgument,
                         "informer " + resource_.String() + ": AddIndex after Start");
    }
  }
  return store_.AddIndex(name, std::move(fn));
}

void SharedInformer::Start() {
  std::lock_guard lock(mu_);
  if (started_) return;
  started_ = true;
  dispatch_thread_ = std::thread([this] { DispatchLoop(); });
  reflector_thread_ = std::thread([this] { reflector_->Run(); });
}

void SharedInformer::Stop() {
  {
    std::lock_guard lock(mu_);
    if (!started_ || stopping_) return;
    stopping_ = true;
  }
  reflector_->Stop();
  if (reflector_thread_.joinable()) reflector_thread_.join();
  queue_cv_.notify_all();
  if (dispatch_thread_.joinable()) dispatch_thread_.join();
  sync_cv_.notify_all();
}

bool SharedInformer::HasSynced() const {
  std::lock_guard lock(mu_);
  return synced_;
}

bool SharedInformer::WaitForCacheSync(std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mu_);
  return sync_cv_.wait_for(lock, timeout, [this] { return synced_ || stopping_; }) && synced_;
}

std::string SharedInformer::LastSyncResourceVersion() const {
  return reflector_->LastSyncResourceVersion();
}

ReflectorStats SharedInformer::reflector_stats() const { return reflector_->Stats(); }

ObjectPtr SharedInformer::Prepare(Object&& obj) const {
  if (options_.drop_managed_fields) DropManagedFields(obj);
  if (options_.transform) options_.transform(obj);
  if (options_.pack_objects) return PackObject(obj);
  return ShareObject(std::move(obj));
}

void SharedInformer::Enqueue(std::vector<Notification> batch) {
  if (batch.empty()) return;
  {
    std::lock_guard lock(mu_);
    for (auto& n : batch) {
      n.seq = next_seq_++;
      queue_.push_back(std::move(n));
    }
  }
  queue_cv_.notify_all();
}

void SharedInformer::OnReplace(std::vector<ObjectPtr> items) {
  std::lock_guard apply(apply_mu_);
  auto changes = store_.Replace(std::move(items));
  std::vector<Notification> batch;
  batch.reserve(changes.size() + 1);
  for (auto& c : changes) {
    Notification n;
    if (!c.old) {
      n.kind = Notification::Kind::kAdd;
    } else if (!c.cur) {
      n.kind = Notification::Kind::kDelete;
      n.final_state_unknown = true;
    } else {
      n.kind = Notification::Kind::kUpdate;
    }
    n.old = std::move(c.old);
    n.cur = std::move(c.cur);
    batch.push_back(std::move(n));
  }
  Notification synced;
  synced.kind = Notification::Kind::kSynced;
  batch.push_back(std::move(synced));
  Enqueue(std::move(batch));
}

void SharedInformer::OnEvent(WatchEvent::Type type, Object obj) {
  ObjectPtr cur = Prepare(std::move(obj));
  std::lock_guard apply(apply_mu_);
  Notification n;
  if (type == WatchEvent::Type::kDeleted) {
    store_.Remove(ObjectKey(*cur));
    n.kind = Notification::Kind::kDelete;
    n.old = std::move(cur);  // the object's final state, as the DELETED event carried it
  } else {
    ObjectPtr old = store_.Upsert(cur);
    n.kind = old ? Notification::Kind::kUpdate : Notification::Kind::kAdd;
    n.old = std::move(old);
    n.cur = std::move(cur);
  }
  std::vector<Notification> batch;
  batch.push_back(std::move(n));
  Enqueue(std::move(batch));
}

void SharedInformer::DispatchLoop() {
  std::vector<std::shared_ptr<EventHandler>> targets;
  for (;;) {
    Notification n;
    targets.clear();
    {
      std::unique_lock lock(mu_);
      queue_cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      n = std::move(queue_.front());
      queue_.pop_front();
      if (n.kind == Notification::Kind::kSynced) {
        if (!synced_) {
          synced_ = true;
          sync_cv_.notify_all();
        }
        continue;
      }
      for (const auto& [id, reg] : handlers_) {
        if (n.target != 0 ? id == n.target : n.seq > reg.after_seq) targets.push_back(reg.handler);
      }
    }
    for (const auto& h : targets) {
      try {
        switch (n.kind) {
          case Notification::Kind::kAdd:
            if (h->on_add) h->on_add(n.cur);
            break;
          case Notification::Kind::kUpdate:
            if (h->on_update) h->on_update(n.old, n.cur);
            break;
          case Notification::Kind::kDelete:
            if (h->on_delete) h->on_delete(n.old, n.final_state_unknown);
            break;
          case Notification::Kind::kSynced:
            break;
        }
      } catch (const std::exception& e) {
        log::Error("informer: event handler threw",
                   {{"resource", resource_.String()}, {"error", e.what()}});
      } catch (...) {
        log::Error("informer: event handler threw", {{"resource", resource_.String()}});
      }
    }
  }
}

InformerFactory::InformerFactory(std::shared_ptr<Client> client, InformerOptions defaults)
    : client_(std::move(client)), defaults_(std::move(defaults)) {}

InformerFactory::~InformerFactory() { Shutdown(); }

std::shared_ptr<SharedInformer> InformerFactory::For(const Resource& resource,
                                                     const InformerOptions* options) {
  const InformerOptions& opts = options != nullptr ? *options : defaults_;
  std::string key = resource.String() + '\x1f' + opts.ns + '\x1f' + opts.label_selector + '\x1f' +
                    opts.field_selector;
  std::lock_guard lock(mu_);
  auto& slot = informers_[key];
  if (!slot) {
    slot = std::make_shared<SharedInformer>(client_, resource, opts);
    if (started_) slot->Start();
  }
  return slot;
}

void InformerFactory::Start() {
  std::lock_guard lock(mu_);
  started_ = true;
  for (auto& [key, informer] : informers_) informer->Start();
}

bool InformerFactory::WaitForCacheSync(std::chrono::milliseconds timeout) {
  std::vector<std::shared_ptr<SharedInformer>> all;
  {
    std::lock_guard lock(mu_);
    for (auto& [key, informer] : informers_) all.push_back(informer);
  }
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (auto& informer : all) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() < 0) left = std::chrono::milliseconds(0);
    if (!informer->WaitForCacheSync(left)) return false;
  }
  return true;
}

void InformerFactory::Shutdown() {
  std::vector<std::shared_ptr<SharedInformer>> all;
  {
    std::lock_guard lock(mu_);
    for (auto& [key, informer] : informers_) all.push_back(informer);
  }
  for (auto& informer : all) informer->Stop();
}

}  // namespace hyperslice::kube
