// The CRI path (cri_runtime.h).
#include "src/runners/agent/cri_runtime.h"

#include <filesystem>
#include <future>
#include <mutex>
#include <set>

#include "src/base/log.h"
#include "src/runners/agent/cri/api.grpc.pb.h"
#include "src/runners/agent/cri_exec.h"
#include "src/runners/link/link.h"

namespace hyperslice::runners::agent {
namespace fs = std::filesystem;
namespace v1 = ::hyperslice::runners::v1;
namespace cri = ::runtime::v1;
using link::FromGrpc;

namespace {

constexpr char kRunnerLabel[] = "runners.hyperslice.dev/runner";
constexpr char kPodUidLabel[] = "runners.hyperslice.dev/pod-uid";
constexpr char kContainerLabel[] = "runners.hyperslice.dev/container";
constexpr char kAttemptLabel[] = "runners.hyperslice.dev/attempt";

std::unique_ptr<grpc::ClientContext> Deadline(std::chrono::seconds s) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + s);
  return ctx;
}

constexpr std::chrono::seconds kCall{30};

// The log of an attempt, relative to the sandbox's log_directory (the pod's logs/ dir).
std::string RelativeLog(const std::string& container, int attempt) {
  return container + "/" + std::to_string(attempt) + ".log";
}

class CriRuntime final : public ContainerRuntime {
 public:
  CriRuntime(CriRuntimeOptions o, const std::shared_ptr<grpc::Channel>& channel)
      : o_(std::move(o)),
        runtime_(cri::RuntimeService::NewStub(channel)),
        images_(cri::ImageService::NewStub(channel)) {}

  Result<Image> Pull(const std::string& image) override {
    cri::PullImageRequest req;
    req.mutable_image()->set_image(image);
    cri::PullImageResponse resp;
    auto ctx = Deadline(o_.pull_timeout);
    if (auto st = images_->PullImage(ctx.get(), req, &resp); !st.ok()) {
      return FromGrpc(st, "the container runtime could not pull " + image);
    }
    Image out;
    // image_ref is the runtime's image id (the config's digest): what containers are created
    // from, as a kubelet does. The manifest digest is the one the reference names.
    out.config_digest = resp.image_ref();
    auto ref = ParseImageRef(image);
    out.manifest_digest = ref.ok() && !ref->digest.empty() ? ref->digest : resp.image_ref();
    return out;
  }

  Result<std::string> EnsureSandbox(const PodRef& pod) override {
    HS_ASSIGN_OR_RETURN(std::string id, Sandbox(pod, /*create=*/true));
    cri::PodSandboxStatusRequest req;
    req.set_pod_sandbox_id(id);
    cri::PodSandboxStatusResponse resp;
    auto ctx = Deadline(kCall);
    if (auto st = runtime_->PodSandboxStatus(ctx.get(), req, &resp); !st.ok()) {
      return FromGrpc(st, "PodSandboxStatus");
    }
    if (pod.spec->host_network()) return std::string();
    return resp.status().network().ip();
  }

  Status Start(const PodRef& pod, const v1::Container& c, const Image& image, int attempt,
               const std::map<std::string, std::string>& agent_binds) override {
    HS_ASSIGN_OR_RETURN(std::string sandbox, Sandbox(pod, /*create=*/false));
    auto t0 = std::chrono::steady_clock::now();
    HS_ASSIGN_OR_RETURN(auto existing, FindContainer(pod.uid(), c.name(), attempt));
    std::string id;
    if (existing) {
      // Created before an agent restart and not started yet: start that one (no duplicate).
      if (existing->second != cri::CONTAINER_CREATED) return OkStatus();
      id = existing->first;
    } else {
      if (attempt > 0) RemoveAttempt(pod.uid(), c.name(), attempt - 1);
      std::error_code ec;
      fs::create_directories(pod.dir + "/logs/" + c.name(), ec);
      cri::CreateContainerRequest req;
      req.set_pod_sandbox_id(sandbox);
      *req.mutable_sandbox_config() = SandboxConfig(pod);
      HS_ASSIGN_OR_RETURN(*req.mutable_config(),
                          ContainerConfig(pod, c, image, attempt, agent_binds));
      cri::CreateContainerResponse resp;
      auto ctx = Deadline(kCall);
      if (auto st = runtime_->CreateContainer(ctx.get(), req, &resp); !st.ok()) {
        return FromGrpc(st, "CreateContainer " + c.name());
      }
      id = resp.container_id();
      Remember(pod.uid(), c.name(), attempt, id);
    }
    cri::StartContainerRequest req;
    req.set_container_id(id);
    cri::StartContainerResponse resp;
    auto ctx = Deadline(kCall);
    if (auto st = runtime_->StartContainer(ctx.get(), req, &resp); !st.ok()) {
      return FromGrpc(st, "StartContainer " + c.name());
    }
    std::lock_guard lock(mu_);
    start_ms_[Key(pod.uid(), c.name(), attempt)] =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return OkStatus();
  }

  AttemptState Observe(const PodRef& pod, const std::string& container, int attempt) override {
    AttemptState s;
    auto found = FindContainer(pod.uid(), container, attempt);
    // Created but never started (an agent killed between the two calls): not started, so the
    // pod manager starts it (Start finds this one).
    if (!found.ok() || !*found || (*found)->second == cri::CONTAINER_CREATED) return s;
    s.known = true;
    cri::ContainerStatusRequest req;
    req.set_container_id((*found)->first);
    cri::ContainerStatusResponse resp;
    auto ctx = Deadline(kCall);
    if (!runtime_->ContainerStatus(ctx.get(), req, &resp).ok()) return s;
    const auto& cs = resp.status();
    constexpr int64_t kNs = 1000000000;
    if (cs.started_at() > 0) {
      StartRecord r;
      r.started_unix = cs.started_at() / kNs;
      std::lock_guard lock(mu_);
      if (auto it = start_ms_.find(Key(pod.uid(), container, attempt)); it != start_ms_.end()) {
        r.runtime_ms = it->second;
      }
      s.started = r;
    }
    if (cs.state() == cri::CONTAINER_EXITED || cs.state() == cri::CONTAINER_UNKNOWN) {
      ExitRecord e;
      e.code = cs.exit_code();
      e.reason = cs.reason().empty() ? (cs.exit_code() == 0 ? "Completed" : "Error") : cs.reason();
      if (cs.started_at() == 0) e.reason = "StartError";
      e.message = cs.message();
      e.finished_unix = cs.finished_at() / kNs;
      s.exit = e;
    }
    return s;
  }

  std::string LogPath(const PodRef& pod, const std::string& container, int attempt) override {
    return pod.dir + "/logs/" + RelativeLog(container, attempt);
  }

  Status Stop(const PodRef& pod, const ContainerAttempts& containers,
              std::chrono::seconds grace) override {
    // In parallel, as a kubelet kills a pod's containers: the grace is the pod's, not each's.
    std::vector<std::future<Status>> stops;
    for (const auto& [name, attempt] : containers) {
      auto found = FindContainer(pod.uid(), name, attempt);
      if (!found.ok()) return found.error();
      if (!*found) continue;
      std::string id = (*found)->first;
      stops.push_back(std::async(std::launch::async, [this, id, grace]() -> Status {
        cri::StopContainerRequest req;
        req.set_container_id(id);
        req.set_timeout(grace.count());  // 0: SIGKILL at once
        cri::StopContainerResponse resp;
        auto ctx = Deadline(grace + kCall);
        if (auto st = runtime_->StopContainer(ctx.get(), req, &resp); !st.ok()) {
          return FromGrpc(st, "StopContainer");
        }
        return OkStatus();
      }));
    }
    Status result = OkStatus();
    for (auto& f : stops) {
      if (Status st = f.get(); !st.ok()) result = st;
    }
    return result;
  }

  Status Remove(const PodRef& pod, const ContainerAttempts& /*containers*/) override {
    Status result = RemovePodObjects(pod.uid());
    std::lock_guard lock(mu_);
    for (auto it = ids_.begin(); it != ids_.end();) {
      it = it->first.rfind(pod.uid() + "/", 0) == 0 ? ids_.erase(it) : std::next(it);
    }
    return result;
  }

  void Forget(const PodRef& /*pod*/) override {}

  grpc::Status Exec(const PodRef& pod, const std::string& container, int attempt,
                    const v1::ExecInput::ExecStart& start, grpc::ServerContext* ctx,
                    grpc::ServerReaderWriter<v1::ExecOutput, v1::ExecInput>* stream) override {
    auto found = FindContainer(pod.uid(), container, attempt);
    if (!found.ok() || !*found) {
      return {grpc::StatusCode::FAILED_PRECONDITION, "container " + container + " is not running"};
    }
    return ServeCriExec(*runtime_, (*found)->first, start, ctx, stream);
  }

  void CollectOrphans(const std::vector<v1::PodStatus>& pods) override {
    std::set<std::string> owned;
    for (const auto& p : pods) owned.insert(p.pod().uid());
    cri::ListPodSandboxRequest req;
    (*req.mutable_filter()->mutable_label_selector())[kRunnerLabel] = o_.runner_name;
    cri::ListPodSandboxResponse resp;
    auto ctx = Deadline(kCall);
    if (!runtime_->ListPodSandbox(ctx.get(), req, &resp).ok()) return;
    std::set<std::string> orphans;
    for (const auto& s : resp.items()) {
      auto it = s.labels().find(kPodUidLabel);
      if (it != s.labels().end() && !owned.count(it->second)) orphans.insert(it->second);
    }
    for (const auto& uid : orphans) {
      log::Warn("removing orphan pod sandbox", {{"uid", uid}});
      (void)RemovePodObjects(uid);
    }
  }

  std::string Health() override {
    cri::VersionRequest req;
    cri::VersionResponse resp;
    auto ctx = Deadline(std::chrono::seconds(5));
    if (auto st = runtime_->Version(ctx.get(), req, &resp); !st.ok()) {
      return "container runtime " + o_.endpoint + " does not answer: " + st.error_message();
    }
    return "";
  }

 private:
  static std::string Key(const std::string& uid, const std::string& name, int attempt) {
    return uid + "/" + name + "/" + std::to_string(attempt);
  }
  void Remember(const std::string& uid, const std::string& name, int attempt,
                const std::string& id) {
    std::lock_guard lock(mu_);
    ids_[Key(uid, name, attempt)] = id;
  }

  cri::PodSandboxConfig SandboxConfig(const PodRef& pod) const {
    cri::PodSandboxConfig cfg;
    const auto& p = pod.spec->pod();
    auto* md = cfg.mutable_metadata();
    md->set_name(p.name());
    md->set_namespace_(p.namespace_());
    md->set_uid(p.uid());
    md->set_attempt(0);
    cfg.set_hostname(pod.spec->hostname().empty() ? p.name() : pod.spec->hostname());
    cfg.set_log_directory(pod.dir + "/logs");
    (*cfg.mutable_labels())[kRunnerLabel] = o_.runner_name;
    (*cfg.mutable_labels())[kPodUidLabel] = p.uid();
    auto* ns = cfg.mutable_linux()->mutable_security_context()->mutable_namespace_options();
    ns->set_network(pod.spec->host_network() ? cri::NODE : cri::POD);
    ns->set_pid(cri::CONTAINER);
    ns->set_ipc(cri::POD);
    return cfg;
  }

  Result<cri::ContainerConfig> ContainerConfig(
      const PodRef& pod, const v1::Container& c, const Image& image, int attempt,
      const std::map<std::string, std::string>& agent_binds) const {
    cri::ContainerConfig cfg;
    cfg.mutable_metadata()->set_name(c.name());
    cfg.mutable_metadata()->set_attempt(static_cast<uint32_t>(attempt));
    cfg.mutable_image()->set_image(image.config_digest);
    // The runtime applies Kubernetes' rule over the image's entrypoint and cmd, as for a kubelet.
    for (const auto& a : c.command()) cfg.add_command(a);
    for (const auto& a : c.args()) cfg.add_args(a);
    cfg.set_working_dir(c.working_dir());
    for (const auto& e : c.env()) {
      auto* kv = cfg.add_envs();
      kv->set_key(e.name());
      kv->set_value(e.value());
    }
    std::map<std::string, std::string> volume_dirs;
    for (const auto& v : pod.spec->volumes())
      volume_dirs[v.name()] = pod.dir + "/volumes/" + v.name();
    for (const auto& m : c.mounts()) {
      HS_ASSIGN_OR_RETURN(std::string source, MountSource(c, m, volume_dirs));
      auto* cm = cfg.add_mounts();
      cm->set_container_path(m.container_path());
      cm->set_host_path(source);
      cm->set_readonly(m.read_only());
    }
    for (const auto& [path, dir] : agent_binds) {
      auto* cm = cfg.add_mounts();
      cm->set_container_path(path);
      cm->set_host_path(dir);
      cm->set_readonly(true);
    }
    if (auto it = pod.devices->find(c.name()); it != pod.devices->end()) {
      for (const auto& d : it->second) {
        auto* dev = cfg.add_devices();
        dev->set_host_path(d.host_path);
        dev->set_container_path(d.container_path);
        dev->set_permissions("rwm");
      }
    }
    HS_ASSIGN_OR_RETURN(CpuMemoryLimits limits, LimitsOf(c));
    auto* res = cfg.mutable_linux()->mutable_resources();
    res->set_memory_limit_in_bytes(limits.memory_bytes);
    res->set_cpu_period(limits.cpu_period);
    res->set_cpu_quota(limits.cpu_quota);
    auto* ns = cfg.mutable_linux()->mutable_security_context()->mutable_namespace_options();
    ns->set_network(pod.spec->host_network() ? cri::NODE : cri::POD);
    ns->set_pid(cri::CONTAINER);  // as the runc path (and a kubelet without shareProcessNamespace)
    ns->set_ipc(cri::POD);
    cfg.set_log_path(RelativeLog(c.name(), attempt));
    cfg.set_tty(c.tty());
    cfg.set_stdin(c.stdin());
    (*cfg.mutable_labels())[kRunnerLabel] = o_.runner_name;
    (*cfg.mutable_labels())[kPodUidLabel] = pod.uid();
    (*cfg.mutable_labels())[kContainerLabel] = c.name();
    (*cfg.mutable_labels())[kAttemptLabel] = std::to_string(attempt);
    return cfg;
  }

  // The pod's ready sandbox; with `create`, made when there is none (a not-ready one, e.g. after
  // the runtime restarted, is removed first: its name is reserved while it exists).
  Result<std::string> Sandbox(const PodRef& pod, bool create) {
    cri::ListPodSandboxRequest list;
    (*list.mutable_filter()->mutable_label_selector())[kRunnerLabel] = o_.runner_name;
    (*list.mutable_filter()->mutable_label_selector())[kPodUidLabel] = pod.uid();
    cri::ListPodSandboxResponse found;
    {
      auto ctx = Deadline(kCall);
      if (auto st = runtime_->ListPodSandbox(ctx.get(), list, &found); !st.ok()) {
        return FromGrpc(st, "ListPodSandbox");
      }
    }
    for (const auto& s : found.items()) {
      if (s.state() == cri::SANDBOX_READY) return s.id();
    }
    if (!create) return Error::Make(Error::Code::kConflict, "the pod's sandbox is not ready");
    for (const auto& s : found.items()) HS_RETURN_IF_ERROR(RemoveSandbox(s.id()));
    std::error_code ec;
    fs::create_directories(pod.dir + "/logs", ec);
    cri::RunPodSandboxRequest req;
    *req.mutable_config() = SandboxConfig(pod);
    cri::RunPodSandboxResponse resp;
    auto ctx = Deadline(o_.pull_timeout);  // may pull the sandbox image
    if (auto st = runtime_->RunPodSandbox(ctx.get(), req, &resp); !st.ok()) {
      return FromGrpc(st, "RunPodSandbox");
    }
    log::Info("pod sandbox running", {{"uid", pod.uid()}, {"sandbox", resp.pod_sandbox_id()}});
    return resp.pod_sandbox_id();
  }

  // The container of this attempt (id, state), found by its labels.
  Result<std::optional<std::pair<std::string, cri::ContainerState>>> FindContainer(
      const std::string& uid, const std::string& name, int attempt) {
    cri::ListContainersRequest req;
    auto& labels = *req.mutable_filter()->mutable_label_selector();
    labels[kRunnerLabel] = o_.runner_name;
    labels[kPodUidLabel] = uid;
    labels[kContainerLabel] = name;
    labels[kAttemptLabel] = std::to_string(attempt);
    {
      std::lock_guard lock(mu_);
      if (auto it = ids_.find(Key(uid, name, attempt)); it != ids_.end()) {
        req.mutable_filter()->set_id(it->second);
      }
    }
    cri::ListContainersResponse resp;
    auto ctx = Deadline(kCall);
    if (auto st = runtime_->ListContainers(ctx.get(), req, &resp); !st.ok()) {
      return FromGrpc(st, "ListContainers");
    }
    if (resp.containers().empty()) {
      return std::optional<std::pair<std::string, cri::ContainerState>>();
    }
    const auto& c = resp.containers(0);
    Remember(uid, name, attempt, c.id());
    return std::make_optional(std::make_pair(c.id(), c.state()));
  }

  void RemoveAttempt(const std::string& uid, const std::string& name, int attempt) {
    auto found = FindContainer(uid, name, attempt);
    if (!found.ok() || !*found) return;
    cri::RemoveContainerRequest req;
    req.set_container_id((*found)->first);
    cri::RemoveContainerResponse resp;
    auto ctx = Deadline(kCall);
    (void)runtime_->RemoveContainer(ctx.get(), req, &resp);  // its log file stays (ours)
    std::lock_guard lock(mu_);
    ids_.erase(Key(uid, name, attempt));
  }

  Status RemoveSandbox(const std::string& id) {
    cri::StopPodSandboxRequest stop;
    stop.set_pod_sandbox_id(id);
    cri::StopPodSandboxResponse stopped;
    {
      // Tears down its network (the CNI plugins release the pod's address) and containers.
      auto ctx = Deadline(kCall);
      if (auto st = runtime_->StopPodSandbox(ctx.get(), stop, &stopped);
          !st.ok() && st.error_code() != grpc::StatusCode::NOT_FOUND) {
        return FromGrpc(st, "StopPodSandbox");
      }
    }
    cri::RemovePodSandboxRequest rm;
    rm.set_pod_sandbox_id(id);
    cri::RemovePodSandboxResponse removed;
    auto ctx = Deadline(kCall);
    if (auto st = runtime_->RemovePodSandbox(ctx.get(), rm, &removed);
        !st.ok() && st.error_code() != grpc::StatusCode::NOT_FOUND) {
      return FromGrpc(st, "RemovePodSandbox");
    }
    return OkStatus();
  }

  // Every container and sandbox of the pod: all attempts, whatever their state.
  Status RemovePodObjects(const std::string& uid) {
    Status result = OkStatus();
    cri::ListContainersRequest req;
    (*req.mutable_filter()->mutable_label_selector())[kRunnerLabel] = o_.runner_name;
    (*req.mutable_filter()->mutable_label_selector())[kPodUidLabel] = uid;
    cri::ListContainersResponse resp;
    {
      auto ctx = Deadline(kCall);
      if (auto st = runtime_->ListContainers(ctx.get(), req, &resp); !st.ok()) {
        return FromGrpc(st, "ListContainers");
      }
    }
    for (const auto& c : resp.containers()) {
      cri::RemoveContainerRequest rm;
      rm.set_container_id(c.id());
      cri::RemoveContainerResponse removed;
      auto ctx = Deadline(kCall);
      if (auto st = runtime_->RemoveContainer(ctx.get(), rm, &removed);
          !st.ok() && st.error_code() != grpc::StatusCode::NOT_FOUND) {
        result = FromGrpc(st, "RemoveContainer");
      }
    }
    cri::ListPodSandboxRequest list;
    (*list.mutable_filter()->mutable_label_selector())[kRunnerLabel] = o_.runner_name;
    (*list.mutable_filter()->mutable_label_selector())[kPodUidLabel] = uid;
    cri::ListPodSandboxResponse found;
    {
      auto ctx = Deadline(kCall);
      if (auto st = runtime_->ListPodSandbox(ctx.get(), list, &found); !st.ok()) {
        return FromGrpc(st, "ListPodSandbox");
      }
    }
    for (const auto& s : found.items()) {
      if (Status st = RemoveSandbox(s.id()); !st.ok()) result = st;
    }
    return result;
  }

  CriRuntimeOptions o_;
  std::unique_ptr<cri::RuntimeService::Stub> runtime_;
  std::unique_ptr<cri::ImageService::Stub> images_;
  std::mutex mu_;
  std::map<std::string, std::string> ids_;  // uid/name/attempt -> container id (a cache)
  std::map<std::string, double> start_ms_;  // uid/name/attempt -> create + start, ms
};

}  // namespace

Result<std::unique_ptr<ContainerRuntime>> NewCriRuntime(CriRuntimeOptions options) {
  if (options.endpoint.rfind("unix://", 0) != 0 || options.endpoint.size() <= 7) {
    return Error::Make(
        Error::Code::kInvalidArgument,
        "--container-runtime-endpoint must be unix:///path/to/socket, not " + options.endpoint);
  }
  if (options.runner_name.empty()) {
    return Error::Make(Error::Code::kInvalidArgument, "the CRI path needs the runner's name");
  }
  auto channel = grpc::CreateChannel(options.endpoint, grpc::InsecureChannelCredentials());
  return std::unique_ptr<ContainerRuntime>(
      std::make_unique<CriRuntime>(std::move(options), channel));
}

}  // namespace hyperslice::runners::agent
