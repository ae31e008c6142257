#include "src/kube/controller.h"

#include <exception>

#include "src/base/log.h"

namespace hyperslice::kube {
namespace {

WorkQueueOptions QueueOptions(ControllerOptions& o) {
  WorkQueueOptions q;
  q.name = o.name;
  q.controller = o.name;
  q.clock = o.clock;
  q.rate_limiter = std::move(o.rate_limiter);
  q.registry = o.registry;
  return q;
}

// controller-runtime's reconcile_time_seconds buckets.
std::vector<double> ReconcileBuckets() {
  return {0.005, 0.01, 0.025, 0.05, 0.1,  0.15, 0.2,  0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6,
          0.7,   0.8,  0.9,   1.0,  1.25, 1.5,  1.75, 2.0,  2.5, 3.0,  3.5, 4.0,  4.5, 5,
          6,     7,    8,     9,    10,   15,   20,   25,   30,  40,   50,  60};
}

}  // namespace

struct Controller::Metrics {
  metrics::Counter* success;
  metrics::Counter* error;
  metrics::Counter* requeue;
  metrics::Counter* requeue_after;
  metrics::Counter* errors;
  metrics::Counter* panics;
  metrics::Histogram* time;
  metrics::Gauge* max_concurrent;
  metrics::Gauge* active;
};

Controller::Controller(ControllerOptions options, ReconcileFunc reconcile)
    : name_(options.name),
      workers_(std::max(1, options.max_concurrent_reconciles)),
      need_leader_election_(options.need_leader_election),
      clock_(options.clock ? *options.clock : RealClock()),
      reconcile_(std::move(reconcile)),
      queue_(QueueOptions(options)) {
  auto& reg = options.registry ? *options.registry : metrics::Registry::Default();
  auto total = [&](const char* result) {
    return &reg.GetCounter("controller_runtime_reconcile_total",
                           "Total number of reconciliations per controller",
                           {{"controller", name_}, {"result", result}});
  };
  metrics::Labels l{{"controller", name_}};
  metrics_ = std::make_unique<Metrics>(Metrics{
      total("success"),
      total("error"),
      total("requeue"),
      total("requeue_after"),
      &reg.GetCounter("controller_runtime_reconcile_errors_total",
                      "Total number of reconciliation errors per controller", l),
      &reg.GetCounter("controller_runtime_reconcile_panics_total",
                      "Total number of reconciliation panics per controller", l),
      &reg.GetHistogram("controller_runtime_reconcile_time_seconds",
                        "Length of time per reconciliation per controller", l, ReconcileBuckets()),
      &reg.GetGauge("controller_runtime_max_concurrent_reconciles",
                    "Maximum number of concurrent reconciles per controller", l),
      &reg.GetGauge("controller_runtime_active_workers",
                    "Number of currently used workers per controller", l),
  });
  metrics_->max_concurrent->Set(workers_);
  metrics_->active->Set(0);
}

Controller::~Controller() {
  Stop(std::chrono::milliseconds(0));
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
}

Status Controller::Start() {
  std::lock_guard lock(mu_);
  if (started_)
    return Error::Make(Error::Code::kInternal, "controller " + name_ + " started twice");
  if (stopping_) return Error::Make(Error::Code::kCancelled, "controller " + name_ + " stopped");
  started_ = true;
  log::Info("starting workers", {{"controller", name_}, {"workers", workers_}});
  running_workers_ = workers_;
  for (int i = 0; i < workers_; ++i) threads_.emplace_back([this] { Worker(); });
  return OkStatus();
}

void Controller::Stop(std::chrono::milliseconds grace) {
  stopping_ = true;
  queue_.ShutDown();
  std::unique_lock lock(mu_);
  if (!exited_cv_.wait_for(lock, grace, [&] { return running_workers_ == 0; })) {
    log::Warn("reconciles still running after the shutdown grace period",
              {{"controller", name_}, {"active", active_.load()}});
  }
}

void Controller::Worker() {
  while (auto key = queue_.Get()) {
    // A stopping controller (or one whose leadership may have lapsed) drops the key: the
    // process that leads next lists every object again.
    if (stopping_ || (gate_ && !gate_())) {
      queue_.Done(*key);
      continue;
    }
    ProcessOne(*key);
    queue_.Done(*key);
  }
  std::lock_guard lock(mu_);
  if (--running_workers_ == 0) exited_cv_.notify_all();
}

void Controller::ProcessOne(const std::string& key) {
  ++active_;
  metrics_->active->Add(1);
  auto start = clock_.Now();
  std::optional<Result<ReconcileResult>> result;
  try {
    result.emplace(reconcile_(key));
  } catch (const std::exception& e) {
    metrics_->panics->Inc();
    result.emplace(
        Error::Make(Error::Code::kInternal, std::string("reconciler threw: ") + e.what()));
  } catch (...) {
    metrics_->panics->Inc();
    result.emplace(Error::Make(Error::Code::kInternal, "reconciler threw a non-exception"));
  }
  metrics_->time->Observe(std::chrono::duration<double>(clock_.Now() - start).count());
  --active_;
  metrics_->active->Add(-1);

  if (!result->ok()) {
    metrics_->errors->Inc();
    metrics_->error->Inc();
    log::Error("reconciler error",
               {{"controller", name_}, {"key", key}, {"error", result->error().ToString()}});
    queue_.AddRateLimited(key);
    return;
  }
  const ReconcileResult& r = result->value();
  if (r.requeue_after > Clock::Duration::zero()) {
    queue_.Forget(key);
    queue_.AddAfter(key, r.requeue_after);
    metrics_->requeue_after->Inc();
  } else if (r.requeue) {
    queue_.AddRateLimited(key);
    metrics_->requeue->Inc();
  } else {
    queue_.Forget(key);
    metrics_->success->Inc();
  }
}

void Controller::Watch(SharedInformer& informer) {
  informer.AddEventHandler(OnEachObject([this](const ObjectPtr& o) { EnqueueObject(*o); }));
}

void Controller::WatchOwned(SharedInformer& informer, const std::string& owner_kind) {
  auto enqueue_owner = [this, owner_kind](const Object& obj) {
    const auto* md = obj.if_contains("metadata");
    if (!md || !md->is_object()) return;
    const auto* refs = md->get_object().if_contains("ownerReferences");
    if (!refs || !refs->is_array()) return;
    const auto* ns = md->get_object().if_contains("namespace");
    std::string prefix = ns && ns->is_string() ? std::string(ns->get_string()) + "/" : "";
    for (const auto& r : refs->get_array()) {
      if (!r.is_object()) continue;
      const auto& ref = r.get_object();
      const auto* c = ref.if_contains("controller");
      const auto* kind = ref.if_contains("kind");
      const auto* name = ref.if_contains("name");
      if (c && c->is_bool() && c->get_bool() && kind && kind->is_string() &&
          kind->get_string() == owner_kind && name && name->is_string()) {
        queue_.Add(prefix + std::string(name->get_string()));
      }
    }
  };
  EventHandler h;
  h.on_add = [enqueue_owner](const ObjectPtr& o) { enqueue_owner(*o); };
  h.on_update = [enqueue_owner](const ObjectPtr& old, const ObjectPtr& cur) {
    enqueue_owner(*old);  // an owner that lost the object hears about it too
    enqueue_owner(*cur);
  };
  h.on_delete = [enqueue_owner](const ObjectPtr& last, bool) { enqueue_owner(*last); };
  informer.AddEventHandler(std::move(h));
}

std::string Controller::KeyOf(const Object& obj) {
  std::string ns, name;
  if (const auto* md = obj.if_contains("metadata"); md && md->is_object()) {
    const auto& m = md->get_object();
    if (const auto* n = m.if_contains("namespace"); n && n->is_string()) ns = n->get_string();
    if (const auto* n = m.if_contains("name"); n && n->is_string()) name = n->get_string();
  }
  return ns.empty() ? name : ns + "/" + name;
}

std::pair<std::string, std::string> Controller::SplitKey(const std::string& key) {
  auto slash = key.find('/');
  if (slash == std::string::npos) return {"", key};
  return {key.substr(0, slash), key.substr(slash + 1)};
}

}  // namespace hyperslice::kube
