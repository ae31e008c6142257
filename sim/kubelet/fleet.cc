// Fleet: follows the simulator's instance events and keeps one Agent per RUNNING VM (fleet.h).
#include "sim/kubelet/fleet.h"

#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "sim/gce/simulator.h"
#include "src/base/log.h"

namespace hyperslice::sim::kubelet {
namespace {

struct Entry {
  std::string project, zone, name, id, status, machine_type;
  // Shared so blocking agent calls (Vanish waits for the agent's thread) run outside the lock.
  std::shared_ptr<Agent> agent;
};

class FleetImpl final : public Fleet {
 public:
  explicit FleetImpl(FleetOptions options) : options_(std::move(options)) {}
  ~FleetImpl() override { Stop(); }

  Status Init() {
    if (options_.simulator == nullptr)
      return Error::Make(Error::Code::kInvalidArgument, "sim kubelet fleet: simulator is required");
    worker_ = std::thread([this] { Work(); });
    subscription_ =
        options_.simulator->SubscribeInstances([this](const gce::InstanceEvent& e) { Enqueue(e); });
    subscribed_ = true;
    return OkStatus();
  }

  std::vector<InstanceAgent> agents() const override {
    std::lock_guard lock(entries_mu_);
    std::vector<InstanceAgent> out;
    for (const auto& [key, e] : entries_) out.push_back(Describe(e));
    return out;
  }

  std::optional<InstanceAgent> agent(const std::string& project, const std::string& zone,
                                     const std::string& name) const override {
    std::lock_guard lock(entries_mu_);
    auto it = entries_.find(Key(project, zone, name));
    if (it == entries_.end()) return std::nullopt;
    return Describe(it->second);
  }

  Status StopHeartbeating(const std::string& project, const std::string& zone,
                          const std::string& name) override {
    return WithAgent(project, zone, name, [](Agent& a) { a.StopHeartbeating(); });
  }
  Status Restore(const std::string& project, const std::string& zone,
                 const std::string& name) override {
    return WithAgent(project, zone, name, [](Agent& a) { a.Restore(); });
  }
  Status Vanish(const std::string& project, const std::string& zone,
                const std::string& name) override {
    return WithAgent(project, zone, name, [](Agent& a) { a.Vanish(); });
  }

  void Stop() override {
    if (subscribed_.exchange(false)) options_.simulator->UnsubscribeInstances(subscription_);
    {
      std::lock_guard lock(queue_mu_);
      stopping_ = true;
      queue_cv_.notify_all();
    }
    if (worker_.joinable()) worker_.join();
    // Agents stop in parallel: one waiting on its metadata long-poll takes up to its bound.
    std::map<std::string, Entry> entries;
    {
      std::lock_guard lock(entries_mu_);
      entries.swap(entries_);
    }
    std::vector<std::thread> stoppers;
    for (auto& [key, e] : entries) {
      if (e.agent) stoppers.emplace_back([a = std::move(e.agent)] { a->Vanish(); });
    }
    for (auto& t : stoppers) t.join();
  }

 private:
  static std::string Key(const std::string& p, const std::string& z, const std::string& n) {
    return p + "/" + z + "/" + n;
  }

  static InstanceAgent Describe(const Entry& e) {
    InstanceAgent a;
    a.project = e.project;
    a.zone = e.zone;
    a.name = e.name;
    a.instance_id = e.id;
    a.instance_status = e.status;
    if (e.agent) {
      a.agent = e.agent->state();
    } else {
      a.agent.phase = Phase::kStopped;
      a.agent.node_name = e.name;
    }
    return a;
  }

  Status WithAgent(const std::string& project, const std::string& zone, const std::string& name,
                   const std::function<void(Agent&)>& f) {
    std::shared_ptr<Agent> agent;
    {
      std::lock_guard lock(entries_mu_);
      auto it = entries_.find(Key(project, zone, name));
      if (it != entries_.end()) agent = it->second.agent;
    }
    if (!agent)
      return Error::Make(Error::Code::kNotFound,
                         "no simulated VM agent for " + Key(project, zone, name));
    f(*agent);  // Agent methods are thread-safe; this may block briefly
    return OkStatus();
  }

  void Enqueue(const gce::InstanceEvent& e) {
    std::lock_guard lock(queue_mu_);
    queue_.push_back(e);
    queue_cv_.notify_all();
  }

  void Work() {
    while (true) {
      gce::InstanceEvent e;
      {
        std::unique_lock lock(queue_mu_);
        queue_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (stopping_) return;
        e = std::move(queue_.front());
        queue_.pop_front();
      }
      Apply(e);
    }
  }

  // One instance event → the agent's lifecycle (see fleet.h). Only this (worker) thread starts,
  // stops and drops agents, so events apply in order; blocking calls happen outside the lock.
  void Apply(const gce::InstanceEvent& e) {
    std::string key = Key(e.project, e.zone, e.name);
    std::shared_ptr<Agent> dropped;  // destroyed (vanished) outside the lock
    std::shared_ptr<Agent> restore, vanish;
    {
      std::lock_guard lock(entries_mu_);
      auto it = entries_.find(key);
      if (e.status.empty()) {
        if (it != entries_.end() && (e.id.empty() || it->second.id == e.id)) {
          dropped = std::move(it->second.agent);
          entries_.erase(it);
          log::Info("sim kubelet fleet: VM gone", {{"instance", key}});
        }
      } else {
        if (options_.filter && !options_.filter(e.project, e.zone, e.name, e.machine_type)) return;
        if (it != entries_.end() && it->second.id != e.id) {
          dropped = std::move(it->second.agent);
          entries_.erase(it);
          it = entries_.end();
        }
        if (it == entries_.end()) {
          Entry fresh;
          fresh.project = e.project;
          fresh.zone = e.zone;
          fresh.name = e.name;
          fresh.id = e.id;
          fresh.machine_type = e.machine_type;
          it = entries_.emplace(key, std::move(fresh)).first;
        }
        Entry& entry = it->second;
        entry.status = e.status;
        if (e.status == "RUNNING") {
          if (!entry.agent) {
            AgentOptions o = options_.agent;
            o.project = e.project;
            o.zone = e.zone;
            o.instance = e.name;
            o.machine_type = e.machine_type;
            o.metadata_host = options_.simulator->metadata_host(e.project, e.zone, e.name);
            if (!options_.apiserver_url.empty()) o.discovery_endpoint = options_.apiserver_url;
            auto started = Agent::Start(std::move(o));
            if (started.ok()) {
              entry.agent = std::move(started).value();
              log::Info("sim kubelet fleet: VM running, agent started", {{"instance", key}});
            } else {
              log::Error("sim kubelet fleet: agent did not start",
                         {{"instance", key}, {"error", started.error().message}});
            }
          } else {
            restore = entry.agent;  // the same VM booted again (restore after a stop)
          }
        } else if (entry.agent && entry.agent->state().phase != Phase::kStopped) {
          vanish = entry.agent;  // STOPPING / TERMINATED: the VM is down, its disk is kept
        }
      }
    }
    if (dropped) dropped->Vanish();
    if (vanish) {
      vanish->Vanish();
      log::Info("sim kubelet fleet: VM not running, agent stopped",
                {{"instance", key}, {"status", e.status}});
    }
    if (restore) {
      restore->Restore();
      log::Info("sim kubelet fleet: VM running again, agent restored", {{"instance", key}});
    }
  }

  FleetOptions options_;
  uint64_t subscription_ = 0;
  std::atomic<bool> subscribed_{false};

  std::mutex queue_mu_;
  std::condition_variable queue_cv_;
  std::deque<gce::InstanceEvent> queue_;
  bool stopping_ = false;
  std::thread worker_;

  mutable std::mutex entries_mu_;
  std::map<std::string, Entry> entries_;
};

}  // namespace

Result<std::unique_ptr<Fleet>> Fleet::Start(FleetOptions options) {
  auto fleet = std::make_unique<FleetImpl>(std::move(options));
  HS_RETURN_IF_ERROR(fleet->Init());
  return std::unique_ptr<Fleet>(std::move(fleet));
}

}  // namespace hyperslice::sim::kubelet
