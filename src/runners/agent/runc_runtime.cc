// The runc CLI path (runc_runtime.h).
#include "src/runners/agent/runc_runtime.h"

#include <sys/mount.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "src/base/command.h"
#include "src/base/log.h"

namespace hyperslice::runners::agent {
namespace fs = std::filesystem;
namespace v1 = ::hyperslice::runners::v1;
using SteadyClock = std::chrono::steady_clock;

std::string RuncContainerId(const std::string& uid, const std::string& container) {
  return "hs-" + uid + "-" + container;
}

namespace {

bool IsMountPoint(const std::string& path) {
  struct stat a {
  }, b{};
  if (::stat(path.c_str(), &a) != 0) return false;
  if (::stat((path + "/..").c_str(), &b) != 0) return false;
  return a.st_dev != b.st_dev;
}

Status WriteConfig(const std::string& path, const std::string& data) {
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << data;
    if (!out) return Error::Make(Error::Code::kInternal, "cannot write " + tmp);
  }
  ::chmod(tmp.c_str(), 0600);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return Error::Make(Error::Code::kInternal, "cannot rename " + tmp);
  }
  return OkStatus();
}

std::string NetnsName(const std::string& uid) { return "hs-" + uid; }

class RuncRuntime final : public ContainerRuntime {
 public:
  explicit RuncRuntime(RuncRuntimeOptions o) : o_(std::move(o)) {}

  Result<Image> Pull(const std::string& image) override { return o_.images->Pull(image); }

  Result<std::string> EnsureSandbox(const PodRef& pod) override {
    if (pod.spec->host_network()) return std::string();
    // A named network namespace per pod (loopback only), shared by its containers and kept
    // across agent restarts; what `ip netns add` does is a bind mount of a new namespace.
    std::string ns = NetnsName(pod.uid());
    if (!fs::exists("/var/run/netns/" + ns)) {
      auto r = RunCommand({o_.ip_binary, "netns", "add", ns});
      if (r.exit_code != 0) {
        return Error::Make(Error::Code::kInternal,
                           "cannot create the pod's network namespace: " + r.errors);
      }
    }
    auto r = RunCommand({o_.ip_binary, "-n", ns, "link", "set", "lo", "up"});
    if (r.exit_code != 0) {
      return Error::Make(Error::Code::kInternal, "cannot bring up the pod's loopback: " + r.errors);
    }
    if (o_.network == nullptr) return std::string();
    return o_.network->Attach(pod.uid(), ns, pod.dir);
  }

  Status Start(const PodRef& pod, const v1::Container& c, const Image& image, int attempt,
               const std::map<std::string, std::string>& agent_binds) override {
    const auto& uid = pod.uid();
    std::string cdir = pod.dir + "/containers/" + c.name();
    std::string id = RuncContainerId(uid, c.name());
    std::error_code ec;
    for (const char* sub : {"rootfs", "upper", "work"}) {
      fs::create_directories(cdir + "/" + sub, ec);
    }
    HS_RETURN_IF_ERROR(o_.runtime->Delete(id));  // the previous attempt's, if any
    if (!IsMountPoint(cdir + "/rootfs")) {
      // The image stays read-only and shared; each container writes to its own upper layer.
      std::string opts =
          "lowerdir=" + image.rootfs + ",upperdir=" + cdir + "/upper,workdir=" + cdir + "/work";
      if (::mount("overlay", (cdir + "/rootfs").c_str(), "overlay", 0, opts.c_str()) != 0) {
        return Error::Make(
            Error::Code::kInternal,
            "cannot mount the container's root filesystem: " + std::string(std::strerror(errno)));
      }
    }
    BundleInput in;
    in.container = &c;
    in.image = image;
    in.hostname = pod.spec->hostname().empty() ? pod.spec->pod().name() : pod.spec->hostname();
    if (!pod.spec->host_network()) in.netns_path = "/var/run/netns/" + NetnsName(uid);
    for (const auto& v : pod.spec->volumes()) {
      in.volume_dirs[v.name()] = pod.dir + "/volumes/" + v.name();
    }
    if (auto it = pod.devices->find(c.name()); it != pod.devices->end()) in.devices = it->second;
    in.cgroups_path = "/hyperslice-runner/" + id;
    in.agent_binds = agent_binds;
    HS_ASSIGN_OR_RETURN(std::string config, RuntimeConfig(in));
    HS_RETURN_IF_ERROR(WriteConfig(cdir + "/config.json", config));
    ShimOptions so{o_.runtime->binary(), o_.runtime->root(), id, cdir, cdir, attempt};
    return SpawnShim(o_.shim_argv, so);
  }

  AttemptState Observe(const PodRef& pod, const std::string& container, int attempt) override {
    std::string cdir = pod.dir + "/containers/" + container;
    AttemptState s;
    s.started = ReadStarted(cdir, attempt);
    s.exit = ReadExit(cdir, attempt);
    s.known = s.started || s.exit;
    if (!s.known) {
      // Between the shim's create and its start record.
      auto state = o_.runtime->State(RuncContainerId(pod.uid(), container));
      s.known = state.ok() && state->has_value();
    }
    return s;
  }

  std::string LogPath(const PodRef& pod, const std::string& container, int attempt) override {
    return AttemptFiles::Log(pod.dir + "/containers/" + container, attempt);
  }

  Status Stop(const PodRef& pod, const ContainerAttempts& containers,
              std::chrono::seconds grace) override {
    auto running = [&] {
      std::vector<std::string> out;
      for (const auto& [name, attempt] : containers) {
        std::string id = RuncContainerId(pod.uid(), name);
        auto s = o_.runtime->State(id);
        if (s.ok() && s->has_value() && ((*s)->status == "running" || (*s)->status == "created")) {
          out.push_back(id);
        }
      }
      return out;
    };
    auto live = running();
    // A grace of 0 is SIGKILL at once; SIGTERM first would only be ignored by many a PID 1.
    if (grace.count() > 0) {
      for (const auto& id : live) (void)o_.runtime->Kill(id, "TERM");
    }
    auto deadline = SteadyClock::now() + grace;
    while (!live.empty() && SteadyClock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      live = running();
    }
    for (const auto& id : live) (void)o_.runtime->Kill(id, "KILL");
    // The shims record the exit and end; wait (bounded) so they do not write into a removed dir.
    auto shim_deadline = SteadyClock::now() + std::chrono::seconds(5);
    for (const auto& [name, attempt] : containers) {
      std::string cdir = pod.dir + "/containers/" + name;
      if (!fs::exists(AttemptFiles::Started(cdir, attempt))) continue;
      while (!ReadExit(cdir, attempt) && SteadyClock::now() < shim_deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
    return OkStatus();
  }

  Status Remove(const PodRef& pod, const ContainerAttempts& containers) override {
    const auto& uid = pod.uid();
    Status result = OkStatus();
    for (const auto& [name, attempt] : containers) {
      if (Status st = o_.runtime->Delete(RuncContainerId(uid, name)); !st.ok()) result = st;
      std::string rootfs = pod.dir + "/containers/" + name + "/rootfs";
      if (IsMountPoint(rootfs) && ::umount2(rootfs.c_str(), MNT_DETACH) != 0) {
        result = Error::Make(Error::Code::kInternal, "cannot unmount " + rootfs);
      }
    }
    if (o_.network != nullptr && !pod.spec->host_network()) {
      if (auto ip = PodNetwork::AddressOf(pod.dir)) {
        std::lock_guard lock(mu_);
        addresses_[uid] = *ip;
      }
      if (Status st = o_.network->Detach(uid); !st.ok()) result = st;
    }
    std::string ns = NetnsName(uid);
    if (!pod.spec->host_network() && fs::exists("/var/run/netns/" + ns)) {
      // A namespace whose last process is still exiting can refuse deletion for a moment (seen
      // under load: the namespace outlived the pod); try a few times before reporting it.
      auto r = RunCommand({o_.ip_binary, "netns", "delete", ns});
      for (int i = 0; i < 5 && r.exit_code != 0 && fs::exists("/var/run/netns/" + ns); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100 << i));
        r = RunCommand({o_.ip_binary, "netns", "delete", ns});
      }
      if (r.exit_code != 0 && fs::exists("/var/run/netns/" + ns)) {
        result = Error::Make(Error::Code::kInternal,
                             "cannot delete the pod's network namespace: " + r.errors);
      }
    }
    return result;
  }

  void Forget(const PodRef& pod) override {
    // Freed only once the pod's record is gone: a restarted agent must never see it taken twice.
    std::lock_guard lock(mu_);
    auto it = addresses_.find(pod.uid());
    if (it == addresses_.end()) return;
    o_.network->Release(it->second);
    addresses_.erase(it);
  }

  grpc::Status Exec(const PodRef& pod, const std::string& container, int /*attempt*/,
                    const v1::ExecInput::ExecStart& start, grpc::ServerContext* ctx,
                    grpc::ServerReaderWriter<v1::ExecOutput, v1::ExecInput>* stream) override {
    return ServeRuncExec(*o_.runtime, RuncContainerId(pod.uid(), container), start, ctx, stream);
  }

  void CollectOrphans(const std::vector<v1::PodStatus>& pods) override {
    auto ids = o_.runtime->List();
    if (!ids.ok()) return;
    std::set<std::string> owned;
    for (const auto& p : pods) {
      for (const auto* list : {&p.init_container_statuses(), &p.container_statuses()}) {
        for (const auto& c : *list) owned.insert(RuncContainerId(p.pod().uid(), c.name()));
      }
    }
    for (const auto& id : *ids) {
      if (id.rfind("hs-", 0) == 0 && !owned.count(id)) {
        log::Warn("removing orphan container", {{"id", id}});
        (void)o_.runtime->Delete(id);
      }
    }
  }

  std::string Health() override {
    std::error_code ec;
    if (fs::exists(o_.runtime->binary(), ec)) return "";
    return "OCI runtime " + o_.runtime->binary() + " is missing";
  }

 private:
  RuncRuntimeOptions o_;
  std::mutex mu_;
  std::map<std::string, std::string> addresses_;  // uid -> address, between Remove and Forget
};

}  // namespace

std::unique_ptr<ContainerRuntime> NewRuncRuntime(RuncRuntimeOptions options) {
  return std::make_unique<RuncRuntime>(std::move(options));
}

}  // namespace hyperslice::runners::agent
