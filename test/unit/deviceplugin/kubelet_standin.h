// A kubelet's device manager as a device plugin sees it across restarts, written from kubelet's
// pkg/kubelet/cm/devicemanager/plugin/v1beta1 (server.go, handler.go, client.go) and
// devicemanager/manager.go, over the v1beta1 gRPC API of src/deviceplugin/api.proto:
//  - Start() is a kubelet (re)start: CleanupPluginDirectory removes every socket in the folder —
//    the plugins' included — and only then the Registration service listens on kubelet.sock;
//  - Register: the client for the resource is replaced (a second Register for a resource that has
//    a client disconnects the first one), the plugin's endpoint is dialled and asked for its
//    options (as the real one does, inside Register), then ListAndWatch runs in the background;
//  - a ListAndWatch stream that ends while the kubelet runs is "ListAndWatch ended unexpectedly":
//    as runClient does, the client that is current for the resource *now* is disconnected (the
//    new, good one when a second registration raced the first stream's end) and the resource's
//    devices count as Unhealthy until the next registration;
//  - Stop() is the kubelet process ending: connections to plugins close, kubelet.sock is left in
//    place after a crash or removed.
// Every instance keeps a Report, final once it is stopped (nothing can reach a stopped instance),
// so tests check "exactly one registration, no stream ended" without waiting for a negative.
#pragma once

#include <sys/stat.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "src/deviceplugin/api.grpc.pb.h"

namespace hyperslice::deviceplugin::testing {

class KubeletStandIn {
 public:
  struct Report {
    int registrations = 0;     // Register calls received
    int replaced_clients = 0;  // Register for a resource that already had a client
    int unexpected_ends = 0;   // "ListAndWatch ended unexpectedly"
    int lists = 0;             // ListAndWatch responses received, all clients
    int healthy = 0;         // Healthy devices the current client listed last; 0 once disconnected
    bool connected = false;  // a client is current for the resource
    std::string authority;   // :authority of the latest Register
    std::vector<std::string> errors;
  };

  KubeletStandIn(std::string dir, std::string resource,
                 const std::string& socket_name = "kubelet.sock")
      : dir_(std::move(dir)), resource_(std::move(resource)), path_(dir_ + "/" + socket_name) {}
  ~KubeletStandIn() { Stop(true); }
  KubeletStandIn(const KubeletStandIn&) = delete;
  KubeletStandIn& operator=(const KubeletStandIn&) = delete;

  // A kubelet start. `cleanup` false leaves the folder as it is (kubelets before the cleanup was
  // added); `listen_delay` is the time between the cleanup and the listen (varied by tests to
  // shuffle the order in which a plugin sees the events).
  bool Start(bool cleanup = true, std::chrono::microseconds listen_delay = {}) {
    {
      std::lock_guard lock(mu_);
      report_ = Report{};
      stopping_ = false;
    }
    if (cleanup) CleanupPluginDirectory();
    if (listen_delay.count() > 0) std::this_thread::sleep_for(listen_delay);
    service_ = std::make_unique<Service>(this);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix:" + path_, grpc::InsecureServerCredentials());
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    return server_ != nullptr;
  }

  // The kubelet process ends; returns the instance's final report.
  Report Stop(bool remove_socket) {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    if (server_) {
      // Register handlers finish first (they may add a client), then every client is closed.
      server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
      server_->Wait();
      server_.reset();
    }
    std::vector<std::shared_ptr<Client>> all;
    {
      std::lock_guard lock(mu_);
      all.swap(all_clients_);
      current_.reset();
    }
    for (auto& c : all) c->ctx.TryCancel();
    for (auto& c : all) {
      if (c->thread.joinable()) c->thread.join();
    }
    if (remove_socket) {
      std::error_code ec;
      std::filesystem::remove(path_, ec);
    }
    std::lock_guard lock(mu_);
    return report_;
  }

  // Waits until the current client's latest list has `devices` Healthy devices.
  bool WaitHealthy(int devices, std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout,
                        [&] { return report_.connected && report_.healthy == devices; });
  }

  Report Snapshot() {
    std::lock_guard lock(mu_);
    return report_;
  }

  const std::string& socket_path() const { return path_; }

 private:
  struct Client {
    std::unique_ptr<v1beta1::DevicePlugin::Stub> stub;
    grpc::ClientContext ctx;
    std::thread thread;
  };

  class Service final : public v1beta1::Registration::Service {
   public:
    explicit Service(KubeletStandIn* k) : k_(k) {}
    grpc::Status Register(grpc::ServerContext* ctx, const v1beta1::RegisterRequest* req,
                          v1beta1::Empty*) override {
      grpc::string_ref authority = ctx->ExperimentalGetAuthority();
      {
        std::lock_guard lock(k_->mu_);
        k_->report_.authority.assign(authority.data(), authority.size());
      }
      return k_->OnRegister(*req);
    }

   private:
    KubeletStandIn* k_;
  };

  // server.go Start → CleanupPluginDirectory (manager.go): the names are read first
  // (Readdirnames(-1)), then every socket among them is removed, once, in directory order. A socket
  // a plugin re-creates meanwhile is not removed again.
  void CleanupPluginDirectory() {
    std::error_code ec;
    std::vector<std::filesystem::path> names;
    for (const auto& entry : std::filesystem::directory_iterator(dir_, ec)) {
      names.push_back(entry.path());
    }
    for (const auto& path : names) {
      struct stat st {};
      if (::lstat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
      std::filesystem::remove(path, ec);
    }
  }

  grpc::Status OnRegister(const v1beta1::RegisterRequest& req) {
    {
      std::lock_guard lock(mu_);
      ++report_.registrations;
      cv_.notify_all();
    }
    if (req.version() != "v1beta1") {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "unsupported version");
    }
    if (req.resource_name() != resource_) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "unexpected resource");
    }
    // handler.go connectClient: registerClient replaces the resource's client...
    auto c = std::make_shared<Client>();
    std::shared_ptr<Client> replaced;
    {
      std::lock_guard lock(mu_);
      if (current_) {
        ++report_.replaced_clients;
        report_.errors.push_back("second Register for " + resource_ +
                                 " while a client was connected");
        replaced = current_;
      }
      current_ = c;
      report_.connected = false;
      report_.healthy = 0;
      all_clients_.push_back(c);
    }
    if (replaced) replaced->ctx.TryCancel();
    // ...then client.go Connect: dial the endpoint (blocking, 10 s) and GetDevicePluginOptions.
    // Its own connection, as a kubelet process has: gRPC would otherwise share one with any
    // channel of this process to the same path (a test's, or an earlier instance's), and that
    // connection may lead to a server whose socket file has since been removed.
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
      if (current_ == c) current_.reset();
      report_.errors.push_back("cannot connect to the plugin: " + st.error_message());
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "failed to connect to the device plugin");
    }
    {
      std::lock_guard lock(mu_);
      if (current_ == c) report_.connected = true;
      cv_.notify_all();
    }
    // runClient in the background. Assigned under the lock Stop() takes before joining.
    std::lock_guard lock(mu_);
    c->thread = std::thread([this, c] { Run(c); });
    return grpc::Status::OK;
  }

  void Run(const std::shared_ptr<Client>& c) {
    auto reader = c->stub->ListAndWatch(&c->ctx, v1beta1::Empty());
    v1beta1::ListAndWatchResponse resp;
    while (reader->Read(&resp)) {
      int healthy = 0;
      for (const auto& d : resp.devices()) healthy += d.health() == "Healthy";
      std::lock_guard lock(mu_);
      ++report_.lists;
      if (current_ == c) report_.healthy = healthy;
      cv_.notify_all();
    }
    grpc::Status st = reader->Finish();
    std::lock_guard lock(mu_);
    if (stopping_) return;
    ++report_.unexpected_ends;
    report_.errors.push_back("ListAndWatch ended unexpectedly: " + st.error_message());
    // runClient → getClient(resource): whichever client is current now is disconnected, and
    // PluginDisconnected marks the resource's devices Unhealthy.
    if (current_) {
      current_->ctx.TryCancel();
      current_.reset();
    }
    report_.connected = false;
    report_.healthy = 0;
    cv_.notify_all();
  }

  const std::string dir_;
  const std::string resource_;
  const std::string path_;
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;

  std::mutex mu_;
  std::condition_variable cv_;
  Report report_;
  bool stopping_ = false;
  std::shared_ptr<Client> current_;
  std::vector<std::shared_ptr<Client>> all_clients_;
};

}  // namespace hyperslice::deviceplugin::testing
