// The kubelet side of the device-plugin API for a simulated VM and the device plugin's restart
// tests (device_manager.h). Written from kubelet's devicemanager (manager.go,
// plugin/v1beta1/{server,handler,client}.go).
#include "sim/kubelet/device_manager.h"

#include <sys/stat.h>

#include <algorithm>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <set>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "src/base/log.h"
#include "src/deviceplugin/api.grpc.pb.h"

namespace hyperslice::sim::kubelet {
namespace {

namespace fs = std::filesystem;

constexpr char kHealthy[] = "Healthy";

class DeviceManagerImpl final : public DeviceManager {
 public:
  explicit DeviceManagerImpl(DeviceManagerOptions o)
      : dir_(std::move(o.plugin_dir)),
        on_change_(std::move(o.on_change)),
        cleanup_(o.cleanup),
        listen_delay_(o.listen_delay) {}
  ~DeviceManagerImpl() override { Stop(); }

  Status Init() {
    std::error_code ec;
    fs::create_directories(dir_, ec);
    if (ec)
      return Error::Make(Error::Code::kInternal, "sim kubelet: " + dir_ + ": " + ec.message());
    if (cleanup_) CleanupPluginDirectory();
    if (listen_delay_.count() > 0) std::this_thread::sleep_for(listen_delay_);
    service_ = std::make_unique<Service>(this);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix:" + dir_ + "/kubelet.sock", grpc::InsecureServerCredentials());
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    if (!server_)
      return Error::Make(Error::Code::kUnavailable,
                         "sim kubelet: cannot serve " + dir_ + "/kubelet.sock");
    return OkStatus();
  }

  std::map<std::string, ResourceDevices> Resources() const override {
    std::lock_guard lock(mu_);
    std::map<std::string, ResourceDevices> out;
    for (const auto& [name, r] : resources_) {
      ResourceDevices d;
      d.capacity = static_cast<int>(r.health.size());
      for (const auto& [id, h] : r.health) {
        bool healthy = r.connected && h == kHealthy;
        d.allocatable += healthy ? 1 : 0;
        if (!healthy) d.unhealthy.push_back(id);
      }
      for (const auto& [uid, held] : allocated_)
        for (const auto& [key, ids] : held)
          if (key.first == name) d.allocated += static_cast<int>(ids.size());
      d.connected = r.connected;
      out[name] = std::move(d);
    }
    return out;
  }

  DeviceManagerReport report() const override {
    std::lock_guard lock(mu_);
    return report_;
  }

  Result<ContainerAllocation> Allocate(const std::string& resource, const std::string& pod_uid,
                                       const std::string& container, int count) override {
    if (count <= 0) return ContainerAllocation{};
    std::shared_ptr<Client> client;
    std::vector<std::string> free;
    {
      std::lock_guard lock(mu_);
      auto it = resources_.find(resource);
      if (it != resources_.end() && it->second.connected) {
        client = it->second.client;
        std::set<std::string> held;
        for (const auto& [uid, m] : allocated_)
          for (const auto& [key, ids] : m)
            if (key.first == resource) held.insert(ids.begin(), ids.end());
        for (const auto& [id, h] : it->second.health)
          if (h == kHealthy && held.count(id) == 0) free.push_back(id);
      }
      if (static_cast<int>(free.size()) < count) {
        // kubelet's devicesToAllocate, word for word.
        return Error::Make(Error::Code::kInvalidArgument,
                           "Allocate failed due to requested number of devices unavailable for " +
                               resource + ". Requested: " + std::to_string(count) +
                               ", Available: " + std::to_string(free.size()) +
                               ", which is unexpected",
                           "UnexpectedAdmissionError");
      }
      // Reserve before the calls, so two containers admitted at once cannot take the same chips.
      allocated_[pod_uid][{resource, container}] = {};
    }
    std::vector<std::string> chosen(free.begin(), free.begin() + count);
    if (client->preferred) {
      v1beta1::PreferredAllocationRequest req;
      auto* c = req.add_container_requests();
      for (const auto& id : free) c->add_available_deviceids(id);
      c->set_allocation_size(count);
      v1beta1::PreferredAllocationResponse resp;
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
      grpc::Status st = client->stub->GetPreferredAllocation(&ctx, req, &resp);
      if (st.ok() && resp.container_responses_size() == 1 &&
          resp.container_responses(0).deviceids_size() == count) {
        chosen.assign(resp.container_responses(0).deviceids().begin(),
                      resp.container_responses(0).deviceids().end());
      }
    }
    v1beta1::AllocateRequest req;
    auto* c = req.add_container_requests();
    for (const auto& id : chosen) c->add_devices_ids(id);
    v1beta1::AllocateResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    grpc::Status st = client->stub->Allocate(&ctx, req, &resp);
    std::lock_guard lock(mu_);
    if (!st.ok() || resp.container_responses_size() != 1) {
      allocated_[pod_uid].erase({resource, container});
      return Error::Make(Error::Code::kUnavailable,
                         "device plugin Allocate for " + resource + " failed: " +
                             (st.ok() ? std::string("no container response") : st.error_message()),
                         "UnexpectedAdmissionError");
    }
    allocated_[pod_uid][{resource, container}] = chosen;
    ContainerAllocation out;
    out.device_ids = chosen;
    const auto& cr = resp.container_responses(0);
    for (const auto& [k, v] : cr.envs()) out.envs[k] = v;
    for (const auto& d : cr.devices()) out.device_paths.push_back(d.host_path());
    return out;
  }

  void Release(const std::string& pod_uid) override {
    {
      std::lock_guard lock(mu_);
      if (allocated_.erase(pod_uid) == 0) return;
    }
    if (on_change_) on_change_();
  }

  void Stop() override { End(/*remove_socket=*/true); }
  void Crash() override { End(/*remove_socket=*/false); }

 private:
  void End(bool remove_socket) {
    std::vector<std::shared_ptr<Client>> clients;
    {
      std::lock_guard lock(mu_);
      if (stopping_) return;
      stopping_ = true;
      clients = all_clients_;
    }
    if (server_) {
      server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
      server_->Wait();
    }
    for (auto& c : clients) c->ctx.TryCancel();
    for (auto& c : clients) {
      std::thread t;
      {
        std::lock_guard lock(mu_);
        t = std::move(c->thread);
      }
      if (t.joinable()) t.join();
    }
    if (!remove_socket) return;
    std::error_code ec;
    fs::remove(dir_ + "/kubelet.sock", ec);
  }

  struct Client {
    std::unique_ptr<v1beta1::DevicePlugin::Stub> stub;
    grpc::ClientContext ctx;
    std::thread thread;
    bool preferred = false;
  };
  struct Resource {
    std::shared_ptr<Client> client;
    bool connected = false;
    std::map<std::string, std::string> health;  // device id -> Healthy/Unhealthy
  };

  class Service final : public v1beta1::Registration::Service {
   public:
    explicit Service(DeviceManagerImpl* m) : m_(m) {}
    grpc::Status Register(grpc::ServerContext* ctx, const v1beta1::RegisterRequest* req,
                          v1beta1::Empty* /*resp*/) override {
      grpc::string_ref authority = ctx->ExperimentalGetAuthority();
      return m_->OnRegister(*req, std::string(authority.data(), authority.size()));
    }

   private:
    DeviceManagerImpl* m_;
  };

  // manager.go CleanupPluginDirectory: every socket in the folder goes, the plugins' included.
  void CleanupPluginDirectory() {
    std::error_code ec;
    std::vector<fs::path> names;
    for (const auto& entry : fs::directory_iterator(dir_, ec)) names.push_back(entry.path());
    for (const auto& path : names) {
      struct stat st {};
      if (::lstat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
      fs::remove(path, ec);
    }
  }

  grpc::Status OnRegister(const v1beta1::RegisterRequest& req, std::string authority) {
    {
      std::lock_guard lock(mu_);
      ++report_.registrations;
      report_.authority = std::move(authority);
    }
    if (req.version() != "v1beta1")
      return Refuse(grpc::StatusCode::INVALID_ARGUMENT,
                    "invalid version \"" + req.version() + "\", supported: v1beta1");
    if (req.resource_name().empty() || req.resource_name().find('/') == std::string::npos)
      return Refuse(grpc::StatusCode::INVALID_ARGUMENT,
                    "invalid extended resource name \"" + req.resource_name() + "\"");
    auto c = std::make_shared<Client>();
    std::shared_ptr<Client> replaced;
    {
      std::lock_guard lock(mu_);
      if (stopping_) return {grpc::StatusCode::UNAVAILABLE, "kubelet is stopping"};
      Resource& r = resources_[req.resource_name()];
      replaced = r.client;
      if (replaced) {
        ++report_.replaced_clients;
        report_.errors.push_back("second Register for " + req.resource_name() +
                                 " while a client was connected");
      }
      r.client = c;
      r.connected = false;
      all_clients_.push_back(c);
    }
    if (replaced) replaced->ctx.TryCancel();
    // Its own connection (a kubelet process's), not one shared with other channels of this
    // process to the same path.
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    auto channel = grpc::CreateCustomChannel("unix:" + dir_ + "/" + req.endpoint(),
                                             grpc::InsecureChannelCredentials(), args);
    c->stub = v1beta1::DevicePlugin::NewStub(channel);
    grpc::ClientContext opts_ctx;
    opts_ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    opts_ctx.set_wait_for_ready(true);
    v1beta1::DevicePluginOptions options;
    grpc::Status st = c->stub->GetDevicePluginOptions(&opts_ctx, v1beta1::Empty(), &options);
    if (!st.ok()) {
      std::lock_guard lock(mu_);
      Resource& r = resources_[req.resource_name()];
      if (r.client == c) r.client.reset();
      report_.errors.push_back("cannot connect to the plugin: " + st.error_message());
      return {grpc::StatusCode::UNAVAILABLE, "failed to dial device plugin: " + st.error_message()};
    }
    c->preferred = options.get_preferred_allocation_available();
    log::Info("sim kubelet: device plugin registered",
              {{"resource", req.resource_name()}, {"endpoint", req.endpoint()}});
    std::lock_guard lock(mu_);
    if (stopping_) return {grpc::StatusCode::UNAVAILABLE, "kubelet is stopping"};
    resources_[req.resource_name()].connected = resources_[req.resource_name()].client == c;
    c->thread = std::thread([this, c, name = req.resource_name()] { Run(c, name); });
    return grpc::Status::OK;
  }

  grpc::Status Refuse(grpc::StatusCode code, const std::string& message) {
    std::lock_guard lock(mu_);
    report_.errors.push_back(message);
    return {code, message};
  }

  // runClient: ListAndWatch until the stream ends; then getClient(resource) — whichever client is
  // current now — is disconnected and the resource's devices are Unhealthy.
  void Run(const std::shared_ptr<Client>& c, const std::string& resource) {
    auto reader = c->stub->ListAndWatch(&c->ctx, v1beta1::Empty());
    v1beta1::ListAndWatchResponse resp;
    while (reader->Read(&resp)) {
      {
        std::lock_guard lock(mu_);
        ++report_.lists;
        Resource& r = resources_[resource];
        if (r.client != c) continue;
        r.health.clear();
        for (const auto& d : resp.devices()) r.health[d.id()] = d.health();
      }
      if (on_change_) on_change_();
    }
    grpc::Status st = reader->Finish();
    {
      std::lock_guard lock(mu_);
      if (stopping_) return;
      ++report_.unexpected_ends;
      report_.errors.push_back("ListAndWatch ended unexpectedly: " + st.error_message());
      Resource& r = resources_[resource];
      if (r.client) r.client->ctx.TryCancel();
      r.connected = false;
      r.client.reset();
      log::Warn("sim kubelet: ListAndWatch ended unexpectedly",
                {{"resource", resource}, {"error", st.error_message()}});
    }
    if (on_change_) on_change_();
  }

  const std::string dir_;
  const std::function<void()> on_change_;
  const bool cleanup_;
  const std::chrono::microseconds listen_delay_;
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;

  mutable std::mutex mu_;
  bool stopping_ = false;
  DeviceManagerReport report_;
  std::map<std::string, Resource> resources_;
  std::vector<std::shared_ptr<Client>> all_clients_;
  // pod uid -> (resource, container) -> device ids
  std::map<std::string, std::map<std::pair<std::string, std::string>, std::vector<std::string>>>
      allocated_;
};

}  // namespace

Result<std::unique_ptr<DeviceManager>> DeviceManager::Start(DeviceManagerOptions options) {
  auto m = std::make_unique<DeviceManagerImpl>(std::move(options));
  HS_RETURN_IF_ERROR(m->Init());
  return std::unique_ptr<DeviceManager>(std::move(m));
}

}  // namespace hyperslice::sim::kubelet
