#include "src/kube/manager.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <thread>

#include "src/base/log.h"
#include "src/kube/informer.h"
#include "src/kube/internal/health_server.h"
#include "src/kube/internal/leader_election.h"

namespace hyperslice::kube {
namespace {

std::string DefaultIdentity() {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) std::snprintf(host, sizeof host, "unknown");
  std::random_device rd;
  std::uniform_int_distribution<uint64_t> dist;
  char suffix[32];
  std::snprintf(suffix, sizeof suffix, "%016llx", static_cast<unsigned long long>(dist(rd)));
  return std::string(host) + "_" + suffix;
}

// SIGTERM/SIGINT → a byte on a pipe, read by a thread that asks the Manager to stop (the only
// async-signal-safe way to hand a signal to ordinary code). A second signal exits at once, as
// controller-runtime's signal handler does.
class SignalWatcher {
 public:
  explicit SignalWatcher(std::function<void()> on_signal) : on_signal_(std::move(on_signal)) {
    if (pipe2(fds_, O_CLOEXEC) != 0) return;
    write_fd_.store(fds_[1]);
    struct sigaction sa {};
    sa.sa_handler = &SignalWatcher::Handle;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, &old_term_);
    sigaction(SIGINT, &sa, &old_int_);
    thread_ = std::thread([this] { Watch(); });
  }
  ~SignalWatcher() {
    if (!thread_.joinable()) return;
    sigaction(SIGTERM, &old_term_, nullptr);
    sigaction(SIGINT, &old_int_, nullptr);
    char quit = 0;
    (void)!write(fds_[1], &quit, 1);
    thread_.join();
    write_fd_.store(-1);
    close(fds_[0]);
    close(fds_[1]);
  }

 private:
  static void Handle(int) {
    int fd = write_fd_.load();
    char c = 1;
    if (fd >= 0) (void)!write(fd, &c, 1);
  }
  void Watch() {
    int signals = 0;
    for (;;) {
      char c;
      ssize_t n = read(fds_[0], &c, 1);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0 || c == 0) return;
      if (++signals == 1) {
        log::Info("signal received: shutting down gracefully");
        on_signal_();
      } else {
        log::Error("second signal received: exiting now");
        std::_Exit(1);
      }
    }
  }

  static inline std::atomic<int> write_fd_{-1};
  std::function<void()> on_signal_;
  int fds_[2] = {-1, -1};
  struct sigaction old_term_ {
  }, old_int_{};
  std::thread thread_;
};

// The informer factory as a runnable: not leader-elected, ready once every cache has synced.
class InformerCache final : public Runnable {
 public:
  explicit InformerCache(std::shared_ptr<InformerFactory> f) : f_(std::move(f)) {}
  std::string Name() const override { return "informer-cache"; }
  Status Start() override {
    f_->Start();
    return OkStatus();
  }
  void Stop(std::chrono::milliseconds) override { f_->Shutdown(); }
  bool NeedLeaderElection() const override { return false; }
  bool Ready() const override { return f_->WaitForCacheSync(std::chrono::milliseconds(0)); }

 private:
  std::shared_ptr<InformerFactory> f_;
};

}  // namespace

Manager::Manager(ManagerOptions options) : options_(std::move(options)) {}

Result<std::unique_ptr<Manager>> Manager::Create(ManagerOptions options) {
  if (!options.registry) options.registry = &metrics::Registry::Default();
  if (!options.clock) options.clock = &RealClock();
  if (options.identity.empty()) options.identity = DefaultIdentity();
  if (options.leader_election) {
    if (!options.client) {
      return Error::Make(Error::Code::kInvalidArgument, "manager: leader election needs a client");
    }
    if (options.leader_election_id.empty()) {
      return Error::Make(Error::Code::kInvalidArgument,
                         "manager: leader election needs leader_election_id (the Lease name)");
    }
  }
  std::unique_ptr<Manager> m(new Manager(std::move(options)));
  if (m->options_.client) {
    m->informers_ = std::make_shared<InformerFactory>(m->options_.client);
    m->runnables_.push_back(std::make_shared<InformerCache>(m->informers_));
  }
  if (m->options_.leader_election) {
    LeaderElectionConfig le;
    le.lease_namespace = m->options_.leader_election_namespace;
    le.lease_name = m->options_.leader_election_id;
    le.identity = m->options_.identity;
    le.lease_duration = m->options_.lease_duration;
    le.renew_deadline = m->options_.renew_deadline;
    le.retry_period = m->options_.retry_period;
    le.release_on_cancel = m->options_.leader_election_release_on_cancel;
    le.clock = m->options_.clock;
    le.registry = m->options_.registry;
    Manager* self = m.get();
    le.on_started_leading = [self] {
      std::lock_guard lock(self->mu_);
      if (self->stop_requested_ || self->leadership_lost_) return;
      self->leading_ = true;
      self->leader_runnables_started_ = true;
      if (self->informers_) self->informers_->Start();  // informers asked for since Run()
      for (auto& r : self->runnables_) {
        if (!r->NeedLeaderElection()) continue;
        LeaderElector* elector = self->elector_.get();
        r->SetLeaderGate([elector] { return elector->IsLeader(); });
        if (auto s = r->Start(); !s.ok()) {
          log::Error("manager: runnable failed to start",
                     {{"runnable", r->Name()}, {"error", s.error().ToString()}});
          self->leadership_lost_ = true;  // cannot lead properly: give the Lease up
        }
      }
      self->cv_.notify_all();
    };
    le.on_stopped_leading = [self] {
      std::lock_guard lock(self->mu_);
      self->leading_ = false;
      if (!self->stop_requested_) self->leadership_lost_ = true;
      self->cv_.notify_all();
    };
    HS_ASSIGN_OR_RETURN(m->elector_, LeaderElector::Create(m->options_.client, std::move(le)));
  }
  if (m->options_.health_probe_port >= 0) {
    HealthServerOptions ho;
    ho.address = m->options_.health_probe_address;
    ho.port = static_cast<uint16_t>(m->options_.health_probe_port);
    ho.registry = m->options_.registry;
    Manager* self = m.get();
    ho.healthz = [self] {
      std::lock_guard lock(self->mu_);
      std::vector<NamedCheck> checks{{"ping", [] { return OkStatus(); }}};
      checks.insert(checks.end(), self->healthz_checks_.begin(), self->healthz_checks_.end());
      return checks;
    };
    ho.readyz = [self] {
      std::lock_guard lock(self->mu_);
      std::vector<NamedCheck> checks{{"started", [self] { return self->Readyz(); }}};
      checks.insert(checks.end(), self->readyz_checks_.begin(), self->readyz_checks_.end());
      return checks;
    };
    HS_ASSIGN_OR_RETURN(m->health_, HealthServer::Start(std::move(ho)));
  }
  return m;
}

Manager::~Manager() {
  Stop();
  {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return !running_; });
  }
  if (health_) health_->Stop();
  elector_.reset();
}

void Manager::Add(std::shared_ptr<Runnable> runnable) {
  std::lock_guard lock(mu_);
  runnables_.push_back(std::move(runnable));
}

void Manager::AddHealthzCheck(const std::string& name, std::function<Status()> check) {
  std::lock_guard lock(mu_);
  healthz_checks_.emplace_back(name, std::move(check));
}

void Manager::AddReadyzCheck(const std::string& name, std::function<Status()> check) {
  std::lock_guard lock(mu_);
  readyz_checks_.emplace_back(name, std::move(check));
}

Status Manager::Readyz() {
  std::lock_guard lock(mu_);
  if (!started_) return Error::Make(Error::Code::kUnavailable, "manager not started");
  for (const auto& r : runnables_) {
    if (!r->NeedLeaderElection() && !r->Ready()) {
      return Error::Make(Error::Code::kUnavailable, r->Name() + " not synced");
    }
  }
  return OkStatus();
}

bool Manager::IsLeader() const {
  if (!options_.leader_election) return true;
  return elector_ && elector_->IsLeader();
}

uint16_t Manager::health_port() const { return health_ ? health_->port() : 0; }

void Manager::Stop() {
  std::lock_guard lock(mu_);
  stop_requested_ = true;
  cv_.notify_all();
}

Status Manager::Run() {
  {
    std::lock_guard lock(mu_);
    if (running_ || started_) {
      return Error::Make(Error::Code::kInternal, "manager: Run called twice");
    }
    running_ = true;
  }
  std::unique_ptr<SignalWatcher> signals;
  if (options_.handle_signals) signals = std::make_unique<SignalWatcher>([this] { Stop(); });

  std::vector<std::shared_ptr<Runnable>> others;
  Status failure;
  {
    std::lock_guard lock(mu_);
    for (auto& r : runnables_) {
      if (!r->NeedLeaderElection() || !options_.leader_election) others.push_back(r);
    }
  }
  // Caches first, then (without leader election) the controllers, in the order they were added.
  std::stable_partition(others.begin(), others.end(),
                        [](const auto& r) { return !r->NeedLeaderElection(); });
  std::vector<std::shared_ptr<Runnable>> started;
  for (auto& r : others) {
    if (auto s = r->Start(); !s.ok()) {
      log::Error("manager: runnable failed to start",
                 {{"runnable", r->Name()}, {"error", s.error().ToString()}});
      failure = s;
      break;
    }
    started.push_back(r);
  }
  {
    std::lock_guard lock(mu_);
    started_ = true;
  }
  if (failure.ok() && elector_) elector_->Start();
  log::Info("manager started",
            {{"identity", options_.identity}, {"leader_election", options_.leader_election}});

  bool lost = false;
  if (failure.ok()) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return stop_requested_ || leadership_lost_; });
    lost = leadership_lost_;
  }
  log::Info("manager stopping", {{"leadership_lost", lost}});

  // Controllers stop taking work first; the Lease is released only after their reconciles
  // finished (or the grace period ran out), so no successor overlaps with them.
  const auto deadline = std::chrono::steady_clock::now() + options_.graceful_shutdown_timeout;
  auto remaining = [&] {
    auto left = deadline - std::chrono::steady_clock::now();
    return std::max(std::chrono::milliseconds(0),
                    std::chrono::duration_cast<std::chrono::milliseconds>(left));
  };
  std::vector<std::shared_ptr<Runnable>> leader_runnables;
  {
    std::lock_guard lock(mu_);
    stop_requested_ = true;  // no leader runnable starts from here on
    if (leader_runnables_started_) {
      for (auto& r : runnables_) {
        if (r->NeedLeaderElection()) leader_runnables.push_back(r);
      }
    }
  }
  for (auto it = leader_runnables.rbegin(); it != leader_runnables.rend(); ++it) {
    (*it)->Stop(remaining());
  }
  if (elector_) elector_->Stop();
  for (auto it = started.rbegin(); it != started.rend(); ++it) (*it)->Stop(remaining());
  signals.reset();
  log::Info("manager stopped");
  {
    std::lock_guard lock(mu_);
    running_ = false;
    cv_.notify_all();
  }
  if (!failure.ok()) return failure;
  if (lost) {
    return Error::Make(Error::Code::kCancelled, "leader election lost", "LeaderElectionLost");
  }
  return OkStatus();
}

}  // namespace hyperslice::kube
