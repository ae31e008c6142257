#include "src/kube/internal/leader_election.h"

#include "src/kube/object_helpers.h"

#include <cmath>
#include <ctime>

#include <boost/json/serialize.hpp>

#include "src/base/json.h"
#include "src/base/log.h"

namespace hyperslice::kube {
namespace {

namespace json = boost::json;

int64_t CeilSeconds(Clock::Duration d) {
  return static_cast<int64_t>(std::ceil(std::chrono::duration<double>(d).count()));
}

}  // namespace

Result<std::unique_ptr<LeaderElector>> LeaderElector::Create(std::shared_ptr<Client> client,
                                                             LeaderElectionConfig config) {
  auto invalid = [](const std::string& m) {
    return Error::Make(Error::Code::kInvalidArgument, "leader election: " + m);
  };
  if (!client) return invalid("a client is required");
  if (config.lease_name.empty()) return invalid("the Lease name is empty");
  if (config.lease_namespace.empty()) return invalid("the Lease namespace is empty");
  if (config.identity.empty()) return invalid("the candidate identity is empty");
  if (config.retry_period <= Clock::Duration::zero()) return invalid("retryPeriod must be > 0");
  if (config.lease_duration <= config.renew_deadline) {
    return invalid("leaseDuration must be greater than renewDeadline");
  }
  if (config.renew_deadline <= config.retry_period * 6 / 5) {
    return invalid("renewDeadline must be greater than 1.2 × retryPeriod");
  }
  return std::unique_ptr<LeaderElector>(new LeaderElector(std::move(client), std::move(config)));
}

LeaderElector::LeaderElector(std::shared_ptr<Client> client, LeaderElectionConfig config)
    : client_(std::move(client)),
      config_(std::move(config)),
      clock_(config_.clock ? *config_.clock : RealClock()) {
  auto& reg = config_.registry ? *config_.registry : metrics::Registry::Default();
  master_status_ = &reg.GetGauge("leader_election_master_status",
                                 "Gauge of if the reporting system is master of the relevant "
                                 "lease, 0 indicates backup, 1 indicates master. 'name' is the "
                                 "string used to identify the lease. Please make sure to group "
                                 "by name.",
                                 {{"name", config_.lease_name}});
  master_status_->Set(0);
  clock_.Register(&cv_);
}

LeaderElector::~LeaderElector() {
  Stop();
  clock_.Unregister(&cv_);
}

void LeaderElector::Start() {
  std::lock_guard lock(mu_);
  if (loop_thread_.joinable() || stop_) return;
  log::Info("leader election: campaigning",
            {{"lease", config_.lease_namespace + "/" + config_.lease_name},
             {"identity", config_.identity}});
  loop_thread_ = std::thread([this] { Loop(); });
  watchdog_thread_ = std::thread([this] { Watchdog(); });
}

bool LeaderElector::IsLeader() const {
  std::lock_guard lock(mu_);
  return leading_ && !lost_ && clock_.Now() < leader_deadline_;
}

std::string LeaderElector::leader() const {
  std::lock_guard lock(mu_);
  return observed_holder_;
}

bool LeaderElector::TryAcquireOrRenew() {
  const auto& leases = resources::Leases();
  const auto& ns = config_.lease_namespace;
  const auto& name = config_.lease_name;
  const std::string now_text = FormatMicroTime(std::chrono::system_clock::now());
  const int64_t lease_seconds = CeilSeconds(config_.lease_duration);

  auto got = client_->Get(leases, ns, name);
  if (!got.ok()) {
    if (got.error().code != Error::Code::kNotFound) {
      log::Warn("leader election: cannot read the Lease", {{"error", got.error().ToString()}});
      return false;
    }
    json::object spec{{"holderIdentity", config_.identity},
                      {"leaseDurationSeconds", lease_seconds},
                      {"acquireTime", now_text},
                      {"renewTime", now_text},
                      {"leaseTransitions", 0}};
    Object lease{{"apiVersion", "coordination.k8s.io/v1"},
                 {"kind", "Lease"},
                 {"metadata", json::object{{"name", name}, {"namespace", ns}}},
                 {"spec", spec}};
    auto created = client_->Create(leases, ns, lease);
    if (!created.ok()) {
      log::Info("leader election: cannot create the Lease",
                {{"error", created.error().ToString()}});
      return false;
    }
    std::lock_guard lock(mu_);
    observed_spec_ = json::serialize(spec);
    observed_holder_ = config_.identity;
    observed_transitions_ = 0;
    observed_acquire_time_ = now_text;
    observed_lease_duration_ = config_.lease_duration;
    observed_time_ = clock_.Now();
    return true;
  }

  Object lease = std::move(got).value();
  json::object spec;
  if (auto* s = lease.if_contains("spec"); s && s->is_object()) spec = s->get_object();
  const std::string holder = jsonfield::StringValue(spec, "holderIdentity");
  {
    std::lock_guard lock(mu_);
    std::string serialized = json::serialize(spec);
    if (serialized != observed_spec_) {
      observed_spec_ = std::move(serialized);
      observed_holder_ = holder;
      observed_transitions_ = jsonfield::IntField(spec, "leaseTransitions").value_or(0);
      observed_acquire_time_ = jsonfield::StringValue(spec, "acquireTime");
      int64_t secs = jsonfield::IntField(spec, "leaseDurationSeconds").value_or(0);
      observed_lease_duration_ =
          secs > 0 ? std::chrono::duration_cast<Clock::Duration>(std::chrono::seconds(secs))
                   : config_.lease_duration;
      observed_time_ = clock_.Now();  // after the read: the conservative choice
    }
    if (!holder.empty() && holder != config_.identity &&
        clock_.Now() < observed_time_ + observed_lease_duration_) {
      return false;  // held by another candidate and not expired
    }
  }

  json::object next{{"holderIdentity", config_.identity},
                    {"leaseDurationSeconds", lease_seconds},
                    {"renewTime", now_text}};
  if (holder == config_.identity) {
    std::string acquired = jsonfield::StringValue(spec, "acquireTime");
    next["acquireTime"] = acquired.empty() ? now_text : acquired;
    next["leaseTransitions"] = jsonfield::IntField(spec, "leaseTransitions").value_or(0);
  } else {
    next["acquireTime"] = now_text;
    next["leaseTransitions"] = jsonfield::IntField(spec, "leaseTransitions").value_or(0) + 1;
  }
  lease["spec"] = next;  // metadata.resourceVersion from the read: a racing writer gets Conflict
  auto updated = client_->Update(leases, ns, lease);
  if (!updated.ok()) {
    if (updated.error().code != Error::Code::kConflict) {
      log::Warn("leader election: cannot update the Lease",
                {{"error", updated.error().ToString()}});
    }
    return false;
  }
  std::lock_guard lock(mu_);
  observed_spec_ = json::serialize(next);
  observed_holder_ = config_.identity;
  observed_transitions_ = next["leaseTransitions"].as_int64();
  observed_acquire_time_ = std::string(next["acquireTime"].as_string());
  observed_lease_duration_ = config_.lease_duration;
  observed_time_ = clock_.Now();
  return true;
}

void LeaderElector::Loop() {
  for (;;) {
    {
      std::lock_guard lock(mu_);
      if (stop_ || lost_) break;
    }
    const auto attempt_start = clock_.Now();
    const bool ok = TryAcquireOrRenew();

    bool became_leader = false;
    bool lose = false;
    std::string new_leader;
    Clock::TimePoint next{};
    {
      std::lock_guard lock(mu_);
      if (lost_) break;
      auto now = clock_.Now();
      if (ok) {
        leader_deadline_ = attempt_start + config_.renew_deadline;
        if (!leading_) {
          leading_ = true;
          became_leader = true;
        }
        next = attempt_start + config_.retry_period;
      } else if (leading_) {
        if (now >= leader_deadline_) {
          lose = true;
        } else {
          next = std::min(now + config_.retry_period, leader_deadline_);
        }
      } else {
        next = now + config_.retry_period;
        if (!observed_holder_.empty() && observed_holder_ != config_.identity) {
          // Wake exactly when the holder's lease would expire, not on the next tick.
          auto expiry = observed_time_ + observed_lease_duration_ + std::chrono::milliseconds(1);
          if (expiry > now) next = std::min(next, expiry);
        }
      }
      if (observed_holder_ != reported_leader_) {
        reported_leader_ = observed_holder_;
        new_leader = observed_holder_;
      }
      cv_.notify_all();  // the watchdog re-reads the deadline
    }
    if (!new_leader.empty()) {
      log::Info("leader election: new leader", {{"leader", new_leader}});
      if (config_.on_new_leader) config_.on_new_leader(new_leader);
    }
    if (lose) {
      LoseLeadership("renewal failed until the renew deadline");
      break;
    }
    if (became_leader) {
      master_status_->Set(1);
      log::Info("leader election: acquired the Lease",
                {{"lease", config_.lease_namespace + "/" + config_.lease_name},
                 {"identity", config_.identity}});
      std::lock_guard cb(cb_mu_);
      bool still_leading;
      {
        std::lock_guard lock(mu_);
        still_leading = leading_ && !lost_ && !stop_;
      }
      if (still_leading) {
        started_callback_ = true;
        if (config_.on_started_leading) config_.on_started_leading();
      }
    }
    std::unique_lock lock(mu_);
    while (!stop_ && !lost_ && clock_.Now() < next) clock_.WaitUntil(cv_, lock, next);
  }
}

void LeaderElector::Watchdog() {
  std::unique_lock lock(mu_);
  while (!stop_ && !lost_) {
    if (leading_) {
      if (clock_.Now() >= leader_deadline_) {
        lock.unlock();
        LoseLeadership("no successful renewal within the renew deadline");
        return;
      }
      clock_.WaitUntil(cv_, lock, leader_deadline_);
    } else {
      cv_.wait(lock);
    }
  }
}

void LeaderElector::LoseLeadership(const char* why) {
  {
    std::lock_guard lock(mu_);
    if (lost_ || !leading_) return;
    lost_ = true;
    leading_ = false;
    cv_.notify_all();
  }
  master_status_->Set(0);
  log::Error("leader election: lost the Lease",
             {{"lease", config_.lease_namespace + "/" + config_.lease_name},
              {"identity", config_.identity},
              {"reason", why}});
  InvokeStopped();
}

void LeaderElector::InvokeStopped() {
  std::lock_guard cb(cb_mu_);
  if (started_callback_ && !stopped_callback_) {
    stopped_callback_ = true;
    if (config_.on_stopped_leading) config_.on_stopped_leading();
  }
}

void LeaderElector::Stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    cv_.notify_all();
  }
  if (loop_thread_.joinable()) loop_thread_.join();
  if (watchdog_thread_.joinable()) watchdog_thread_.join();
  bool was_leading;
  {
    std::lock_guard lock(mu_);
    was_leading = leading_ && !lost_ && clock_.Now() < leader_deadline_;
    if (leading_) {
      leading_ = false;
      lost_ = true;
    }
  }
  if (was_leading && config_.release_on_cancel) Release();
  master_status_->Set(0);
  InvokeStopped();
}

void LeaderElector::Release() {
  const auto& leases = resources::Leases();
  auto got = client_->Get(leases, config_.lease_namespace, config_.lease_name);
  if (!got.ok()) {
    log::Warn("leader election: cannot read the Lease to release it",
              {{"error", got.error().ToString()}});
    return;
  }
  Object lease = std::move(got).value();
  json::object spec;
  if (auto* s = lease.if_contains("spec"); s && s->is_object()) spec = s->get_object();
  if (jsonfield::StringValue(spec, "holderIdentity") != config_.identity) return;
  const std::string now_text = FormatMicroTime(std::chrono::system_clock::now());
  // client-go's release record: no holder, a 1 s lease, transitions kept.
  lease["spec"] =
      json::object{{"holderIdentity", ""},
                   {"leaseDurationSeconds", 1},
                   {"acquireTime", now_text},
                   {"renewTime", now_text},
                   {"leaseTransitions", jsonfield::IntField(spec, "leaseTransitions").value_or(0)}};
  auto updated = client_->Update(leases, config_.lease_namespace, lease);
  if (!updated.ok()) {
    log::Warn("leader election: cannot release the Lease", {{"error", updated.error().ToString()}});
    return;
  }
  log::Info("leader election: released the Lease",
            {{"lease", config_.lease_namespace + "/" + config_.lease_name}});
}

}  // namespace hyperslice::kube
