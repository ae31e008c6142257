#include "test/integration/runners_controlnode/agent_double.h"

#include <chrono>
#include <ctime>
#include <vector>

namespace hyperslice::testing {

namespace v1 = hyperslice::runners::v1;

class AgentDouble::Service final : public v1::RunnerAgent::Service {
 public:
  explicit Service(const Options& o) : o_(o) {}

  grpc::Status Info(grpc::ServerContext*, const v1::InfoRequest*, v1::RunnerInfo* out) override {
    std::lock_guard lock(mu_);
    out->set_runner_name(o_.runner);
    out->set_region(o_.region);
    out->set_zone(o_.zone);
    for (const auto& [k, v] : o_.capacity) (*out->mutable_capacity())[k] = v;
    out->set_healthy(healthy_);
    out->set_agent_version("double");
    out->set_boot_id("boot-" + std::to_string(boot_));
    out->mutable_policy()->set_allow_host_network(o_.allow_host_network);
    out->mutable_policy()->set_require_digest(o_.require_digest);
    out->set_slice(o_.slice);
    out->set_slice_index(o_.slice_index);
    return grpc::Status::OK;
  }

  grpc::Status RunPod(grpc::ServerContext*, const v1::RunPodRequest* req,
                      v1::PodStatus* out) override {
    std::lock_guard lock(mu_);
    const std::string& uid = req->pod().uid();
    ++run_calls_[uid];
    ++total_run_;
    last_[uid] = *req;
    auto it = pods_.find(uid);
    if (it == pods_.end()) {
      v1::PodStatus st;
      *st.mutable_pod() = req->pod();
      st.set_phase("Running");
      st.set_pod_ip("10.77.0." + std::to_string(1 + pods_.size() % 250));
      st.set_start_time_unix(std::time(nullptr));
      for (const auto& c : req->containers()) {
        auto* cs = st.add_container_statuses();
        cs->set_name(c.name());
        cs->set_image(c.image());
        cs->set_image_id(c.image());
        cs->set_ready(true);
        cs->mutable_running()->set_started_at_unix(std::time(nullptr));
      }
      it = pods_.emplace(uid, st).first;
      Changed(st);
    }
    *out = it->second;
    return grpc::Status::OK;
  }

  grpc::Status DeletePod(grpc::ServerContext*, const v1::DeletePodRequest* req,
                         v1::DeletePodResponse*) override {
    std::lock_guard lock(mu_);
    ++delete_calls_[req->uid()];
    auto it = pods_.find(req->uid());
    if (it != pods_.end()) {
      v1::PodStatus gone = it->second;
      gone.set_deleted(true);
      pods_.erase(it);
      Changed(gone);
    }
    return grpc::Status::OK;
  }

  grpc::Status ListPods(grpc::ServerContext*, const v1::ListPodsRequest*,
                        v1::ListPodsResponse* out) override {
    std::lock_guard lock(mu_);
    for (const auto& [_, p] : pods_) *out->add_pods() = p;
    return grpc::Status::OK;
  }

  grpc::Status WatchPods(grpc::ServerContext* ctx, const v1::WatchPodsRequest*,
                         grpc::ServerWriter<v1::PodStatus>* w) override {
    std::unique_lock lock(mu_);
    size_t seen = log_.size();
    for (const auto& [_, p] : pods_) {
      v1::PodStatus copy = p;
      lock.unlock();
      if (!w->Write(copy)) return grpc::Status::OK;
      lock.lock();
    }
    while (!ctx->IsCancelled() && !stopping_) {
      cv_.wait_for(lock, std::chrono::milliseconds(100));
      while (seen < log_.size()) {
        v1::PodStatus copy = log_[seen++];
        lock.unlock();
        if (!w->Write(copy)) return grpc::Status::OK;
        lock.lock();
      }
    }
    return grpc::Status::OK;
  }

  void Changed(const v1::PodStatus& st) {
    log_.push_back(st);
    cv_.notify_all();
  }

  void Finish(const std::string& uid, int code) {
    std::lock_guard lock(mu_);
    auto it = pods_.find(uid);
    if (it == pods_.end()) return;
    v1::PodStatus& st = it->second;
    st.set_phase(code == 0 ? "Succeeded" : "Failed");
    for (auto& cs : *st.mutable_container_statuses()) {
      int64_t started = cs.has_running() ? cs.running().started_at_unix() : std::time(nullptr);
      cs.set_ready(false);
      auto* t = cs.mutable_terminated();
      t->set_exit_code(code);
      t->set_reason(code == 0 ? "Completed" : "Error");
      t->set_started_at_unix(started);
      t->set_finished_at_unix(std::time(nullptr));
    }
    Changed(st);
  }

  std::mutex mu_;
  std::condition_variable cv_;
  const Options& o_;
  bool healthy_ = true;
  bool stopping_ = false;
  int boot_ = 1;
  std::map<std::string, v1::PodStatus> pods_;  // survives Kill/Start, as the real agent's state
  std::vector<v1::PodStatus> log_;
  std::map<std::string, int> run_calls_, delete_calls_;
  std::map<std::string, v1::RunPodRequest> last_;
  int total_run_ = 0;
};

AgentDouble::AgentDouble(Options o) : o_(std::move(o)), service_(std::make_unique<Service>(o_)) {}

AgentDouble::~AgentDouble() { Kill(); }

bool AgentDouble::Start() {
  {
    std::lock_guard lock(service_->mu_);
    service_->stopping_ = false;
    if (port_ != 0) ++service_->boot_;
  }
  grpc::ServerBuilder b;
  auto creds = o_.credentials ? o_.credentials : grpc::InsecureServerCredentials();
  int selected = 0;
  b.AddListeningPort("127.0.0.1:" + std::to_string(port_), creds, &selected);
  b.RegisterService(service_.get());
  server_ = b.BuildAndStart();
  if (!server_ || selected == 0) return false;
  port_ = selected;
  return true;
}

void AgentDouble::Kill() {
  if (!server_) return;
  {
    std::lock_guard lock(service_->mu_);
    service_->stopping_ = true;
  }
  service_->cv_.notify_all();
  server_->Shutdown(std::chrono::system_clock::now());
  server_->Wait();
  server_.reset();
}

std::string AgentDouble::address() const { return "127.0.0.1:" + std::to_string(port_); }

int AgentDouble::RunPodCalls(const std::string& uid) const {
  std::lock_guard lock(service_->mu_);
  auto it = service_->run_calls_.find(uid);
  return it == service_->run_calls_.end() ? 0 : it->second;
}
int AgentDouble::DeletePodCalls(const std::string& uid) const {
  std::lock_guard lock(service_->mu_);
  auto it = service_->delete_calls_.find(uid);
  return it == service_->delete_calls_.end() ? 0 : it->second;
}
int AgentDouble::TotalRunPodCalls() const {
  std::lock_guard lock(service_->mu_);
  return service_->total_run_;
}
std::optional<runners::v1::RunPodRequest> AgentDouble::LastRequest(const std::string& uid) const {
  std::lock_guard lock(service_->mu_);
  auto it = service_->last_.find(uid);
  if (it == service_->last_.end()) return std::nullopt;
  return it->second;
}
bool AgentDouble::Has(const std::string& uid) const {
  std::lock_guard lock(service_->mu_);
  return service_->pods_.count(uid) > 0;
}
size_t AgentDouble::PodCount() const {
  std::lock_guard lock(service_->mu_);
  return service_->pods_.size();
}
void AgentDouble::Finish(const std::string& uid, int exit_code) {
  service_->Finish(uid, exit_code);
}
void AgentDouble::SetHealthy(bool healthy) {
  std::lock_guard lock(service_->mu_);
  service_->healthy_ = healthy;
}

}  // namespace hyperslice::testing
