// DevicePlugin: the device table, the v1beta1 DevicePlugin service, registration with kubelet and
// the inotify watcher that ties them together. See deviceplugin.h for the contract.
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include <grpcpp/create_channel_posix.h>
#include <grpcpp/grpcpp.h>

#include "src/base/log.h"
#include "src/deviceplugin/allocation.h"
#include "src/deviceplugin/api.grpc.pb.h"
#include "src/deviceplugin/deviceplugin.h"

namespace hyperslice::deviceplugin {
namespace {

using Clock = std::chrono::steady_clock;

// Identity of a file: a re-created file differs even when the inode number is reused.
struct FileId {
  dev_t dev = 0;
  ino_t ino = 0;
  int64_t ctime_ns = 0;
  bool operator==(const FileId&) const = default;
};

std::optional<FileId> Identify(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return std::nullopt;
  return FileId{st.st_dev, st.st_ino,
                static_cast<int64_t>(st.st_ctim.tv_sec) * 1000000000 + st.st_ctim.tv_nsec};
}

std::string Join(const std::string& dir, std::string_view name) {
  if (!dir.empty() && dir.back() == '/') return dir + std::string(name);
  return dir + "/" + std::string(name);
}

// The chips this plugin serves and their health. Thread-safe; `version` increases on every change
// of the list a ListAndWatch stream would send, and `changed` is signalled then.
class DeviceTable {
 public:
  struct Entry {
    Chip chip;
    bool healthy = false;
  };

  DeviceTable(std::string root, Mode mode, int expected)
      : root_(std::move(root)), expected_(expected), mode_(mode) {}

  // Re-discovers and re-probes. Returns whether the served list changed.
  bool Rescan() {
    Mode mode;
    {
      std::lock_guard lock(mu_);
      mode = mode_;
    }
    Result<Inventory> inv = Discover(root_, mode);
    if (!inv.ok()) {
      log::Warn("device discovery failed", {{"error", inv.error().message}});
      return false;
    }
    std::vector<Entry> found;
    for (Chip& chip : inv->chips) {
      bool healthy = ProbeHealthy(root_, chip, inv->mode);
      found.push_back({std::move(chip), healthy});
    }
    std::lock_guard lock(mu_);
    if (mode_ == Mode::kAuto && inv->mode != Mode::kAuto) {
      mode_ = inv->mode;
      log::Info("tpu driver model detected", {{"mode", ModeName(mode_)}});
    }
    std::map<std::string, Entry> next;
    for (auto& [id, e] : entries_) next[id] = {e.chip, false};
    for (Entry& e : found) next[e.chip.id] = std::move(e);
    bool changed = next.size() != entries_.size();
    for (auto& [id, e] : next) {
      auto old = entries_.find(id);
      if (old == entries_.end()) {
        changed = true;
        log::Info("tpu chip discovered", {{"device", id},
                                          {"index", e.chip.index},
                                          {"numa_node", e.chip.numa_node},
                                          {"healthy", e.healthy}});
        continue;
      }
      if (old->second.healthy != e.healthy) {
        changed = true;
        log::Write(e.healthy ? log::Level::kInfo : log::Level::kWarn, "tpu chip health changed",
                   {{"device", id}, {"health", e.healthy ? kHealthy : kUnhealthy}});
      }
      if (old->second.chip.numa_node != e.chip.numa_node) changed = true;
    }
    int missing = expected_ > 0 ? std::max(0, expected_ - static_cast<int>(next.size())) : 0;
    if (missing != missing_) {
      changed = true;
    }
    bool mismatch = expected_ > 0 && static_cast<int>(next.size()) != expected_;
    if (mismatch && (changed || !warned_mismatch_)) {
      log::Warn("tpu chip count differs from the node's cloud.google.com/gke-accelerator-count",
                {{"expected", expected_},
                 {"found", static_cast<int64_t>(next.size())},
                 {"unhealthy_placeholders", missing}});
    }
    warned_mismatch_ = mismatch;
    entries_ = std::move(next);
    missing_ = missing;
    if (changed) {
      ++version_;
      changed_.notify_all();
    }
    return changed;
  }

  v1beta1::ListAndWatchResponse Snapshot(uint64_t* version) const {
    std::lock_guard lock(mu_);
    *version = version_;
    return SnapshotLocked();
  }

  // Blocks until the version differs from `seen`, `stop()` is true, or `timeout` passes.
  template <typename Stop>
  void WaitForChange(uint64_t seen, Stop stop, std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu_);
    changed_.wait_for(lock, timeout, [&] { return version_ != seen || stop(); });
  }

  // Wakes every waiter (used when a server generation stops).
  void Wake() {
    std::lock_guard lock(mu_);
    changed_.notify_all();
  }

  std::optional<Entry> Find(const std::string& id) const {
    std::lock_guard lock(mu_);
    auto it = entries_.find(id);
    if (it == entries_.end()) return std::nullopt;
    return it->second;
  }

  bool IsPlaceholder(const std::string& id) const {
    std::lock_guard lock(mu_);
    for (int k = 0; k < missing_; ++k) {
      if (id == "missing-" + std::to_string(k)) return true;
    }
    return false;
  }

  std::string KnownIds() const {
    std::lock_guard lock(mu_);
    std::string out;
    for (const auto& [id, e] : entries_) out += (out.empty() ? "" : ",") + id;
    return out.empty() ? "none" : out;
  }

  // Chips on the host as a whole: the expected count when it is larger than what was found.
  int HostChips() const {
    std::lock_guard lock(mu_);
    return std::max(static_cast<int>(entries_.size()), expected_);
  }

  Mode mode() const {
    std::lock_guard lock(mu_);
    return mode_;
  }

  void Fill(PluginStatus& s) const {
    std::lock_guard lock(mu_);
    s.mode = mode_;
    s.chips = static_cast<int>(entries_.size());
    s.healthy = static_cast<int>(std::count_if(entries_.begin(), entries_.end(),
                                               [](const auto& kv) { return kv.second.healthy; }));
    s.missing = missing_;
  }

 private:
  v1beta1::ListAndWatchResponse SnapshotLocked() const {
    std::vector<const Entry*> ordered;
    for (const auto& [id, e] : entries_) ordered.push_back(&e);
    std::sort(ordered.begin(), ordered.end(),
              [](const Entry* a, const Entry* b) { return a->chip.index < b->chip.index; });
    v1beta1::ListAndWatchResponse resp;
    for (const Entry* e : ordered) {
      v1beta1::Device* d = resp.add_devices();
      d->set_id(e->chip.id);
      d->set_health(e->healthy ? kHealthy : kUnhealthy);
      if (e->chip.numa_node >= 0) d->mutable_topology()->add_nodes()->set_id(e->chip.numa_node);
    }
    for (int k = 0; k < missing_; ++k) {
      v1beta1::Device* d = resp.add_devices();
      d->set_id("missing-" + std::to_string(k));
      d->set_health(kUnhealthy);
    }
    return resp;
  }

  const std::string root_;
  const int expected_;
  mutable std::mutex mu_;
  std::condition_variable changed_;
  Mode mode_;
  std::map<std::string, Entry> entries_;
  int missing_ = 0;
  bool warned_mismatch_ = false;
  uint64_t version_ = 1;
};

// One generation of the served DevicePlugin service; a restart makes a new one.
class TpuService final : public v1beta1::DevicePlugin::Service {
 public:
  explicit TpuService(DeviceTable* table) : table_(table) {}

  void Stop() {
    stopping_ = true;
    table_->Wake();
  }

  grpc::Status GetDevicePluginOptions(grpc::ServerContext*, const v1beta1::Empty*,
                                      v1beta1::DevicePluginOptions* out) override {
    out->set_pre_start_required(false);
    out->set_get_preferred_allocation_available(true);
    return grpc::Status::OK;
  }

  grpc::Status ListAndWatch(grpc::ServerContext* ctx, const v1beta1::Empty*,
                            grpc::ServerWriter<v1beta1::ListAndWatchResponse>* writer) override {
    uint64_t sent = 0;
    while (!stopping_ && !ctx->IsCancelled()) {
      uint64_t version = 0;
      v1beta1::ListAndWatchResponse resp = table_->Snapshot(&version);
      if (version != sent) {
        if (!writer->Write(resp)) break;
        sent = version;
      }
      // Short timeout only to notice a client that went away; changes wake the wait at once.
      table_->WaitForChange(
          sent, [this] { return stopping_.load(); }, std::chrono::milliseconds(250));
    }
    return grpc::Status::OK;
  }

  grpc::Status GetPreferredAllocation(grpc::ServerContext*,
                                      const v1beta1::PreferredAllocationRequest* req,
                                      v1beta1::PreferredAllocationResponse* out) override {
    for (const auto& creq : req->container_requests()) {
      std::vector<Candidate> available;
      for (const std::string& id : creq.available_deviceids()) {
        std::optional<DeviceTable::Entry> e = table_->Find(id);
        if (!e) continue;  // kubelet may still hold IDs of a previous generation; not choosable
        available.push_back({id, e->chip.index, e->chip.numa_node});
      }
      std::vector<std::string> must(creq.must_include_deviceids().begin(),
                                    creq.must_include_deviceids().end());
      Result<std::vector<std::string>> pick =
          ChoosePreferred(available, must, creq.allocation_size());
      if (!pick.ok()) {
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, pick.error().message);
      }
      auto* cresp = out->add_container_responses();
      for (const std::string& id : *pick) cresp->add_deviceids(id);
    }
    return grpc::Status::OK;
  }

  grpc::Status Allocate(grpc::ServerContext*, const v1beta1::AllocateRequest* req,
                        v1beta1::AllocateResponse* out) override {
    const bool vfio = table_->mode() == Mode::kVfio;
    const int host_chips = table_->HostChips();
    for (const auto& creq : req->container_requests()) {
      auto* cresp = out->add_container_responses();
      std::set<std::string> seen;
      std::vector<int> indices;
      for (const std::string& id : creq.devices_ids()) {
        if (!seen.insert(id).second) continue;
        std::optional<DeviceTable::Entry> e = table_->Find(id);
        if (!e) {
          if (table_->IsPlaceholder(id)) {
            return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                                "device \"" + id +
                                    "\" stands for an expected TPU chip that is not present on "
                                    "this node; it cannot be allocated");
          }
          return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                              "unknown device \"" + id + "\" for " + kResourceName +
                                  "; this node serves: " + table_->KnownIds());
        }
        if (!e->healthy) {
          return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                              "device \"" + id +
                                  "\" is Unhealthy (its device node is missing or cannot be "
                                  "opened); allocate another chip");
        }
        indices.push_back(e->chip.index);
        for (const std::string& path : e->chip.device_paths) {
          auto* spec = cresp->add_devices();
          spec->set_container_path(path);
          spec->set_host_path(path);
          spec->set_permissions(vfio ? "mrw" : "rw");
        }
      }
      if (vfio && !indices.empty()) {
        auto* spec = cresp->add_devices();
        spec->set_container_path(std::string(kVfioContainerPath));
        spec->set_host_path(std::string(kVfioContainerPath));
        spec->set_permissions("mrw");
      }
      if (!indices.empty()) {
        for (auto& [k, v] : TpuEnv(indices, host_chips)) (*cresp->mutable_envs())[k] = v;
      }
    }
    return grpc::Status::OK;
  }

  grpc::Status PreStartContainer(grpc::ServerContext*, const v1beta1::PreStartContainerRequest*,
                                 v1beta1::PreStartContainerResponse*) override {
    return grpc::Status::OK;
  }

 private:
  DeviceTable* table_;
  std::atomic<bool> stopping_{false};
};

// How the plugin follows kubelet restarts (kubelet's devicemanager, plugin/v1beta1/server.go: on
// start, CleanupPluginDirectory removes every socket in the folder — ours included — and only
// then listens on kubelet.sock; handler.go: a second Register for the same resource replaces the
// client, and the replaced client's ListAndWatch end disconnects the resource, marking its devices
// Unhealthy). So one kubelet instance must see exactly one Register, and the stream it opens must
// never be ended by us. The watcher therefore acts on state, not on single events:
//  - a kubelet instance is the identity (device, inode, ctime) of the kubelet.sock file; the
//    plugin registers once per instance, on a connection it made itself to exactly that file;
//  - when its own socket file is gone, it serves the path again on a new server and keeps the old
//    one running (retired) until a later instance has registered, so a stream the kubelet holds is
//    never cut by this;
//  - plugin-folder events are coalesced (kSettle after the last one, kSettleMax at most) before
//    the state is looked at, so one restart's burst (own socket removed, kubelet.sock removed,
//    kubelet.sock created, in whatever order) is handled in one pass.
constexpr auto kSettle = std::chrono::milliseconds(20);
constexpr auto kSettleMax = std::chrono::milliseconds(200);
constexpr auto kBackoffMin = std::chrono::milliseconds(100);
constexpr auto kBackoffMax = std::chrono::milliseconds(5000);

// A connected stream socket to a unix socket path, and the identity of the file it reached.
struct UnixConnection {
  int fd = -1;
  FileId file;
};

// Connects to `path` and proves which file the connection went to: the file's identity is the
// same just before and just after connect(), so the listener reached is that file's. Errors:
// nothing there, nothing accepting (ECONNREFUSED: a kubelet that died and left its socket), or the
// file replaced while connecting (retry at once).
Result<UnixConnection> ConnectProven(const std::string& path) {
  sockaddr_un addr{};
  if (path.size() >= sizeof addr.sun_path) {
    return Error::Make(Error::Code::kInvalidArgument, "socket path too long: " + path);
  }
  std::optional<FileId> before = Identify(path);
  if (!before) return Error::Make(Error::Code::kNotFound, path + " does not exist");
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0)
    return Error::Make(Error::Code::kInternal, std::string("socket: ") + std::strerror(errno));
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  // A unix stream connect completes at once or fails (EAGAIN: backlog full); it never blocks.
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    std::string why = std::strerror(errno);
    ::close(fd);
    return Error::Make(Error::Code::kUnavailable, "connect " + path + ": " + why);
  }
  if (Identify(path) != before) {
    ::close(fd);
    return Error::Make(Error::Code::kConflict, path + " was replaced while connecting");
  }
  return UnixConnection{fd, *before};
}

class PluginImpl final : public DevicePlugin {
 public:
  explicit PluginImpl(Options opts)
      : opts_(std::move(opts)),
        table_(opts_.root, opts_.mode, opts_.expected_chips),
        socket_path_(Join(opts_.plugin_dir, opts_.socket_name)),
        kubelet_path_(Join(opts_.plugin_dir, opts_.kubelet_socket_name)) {}

  ~PluginImpl() override { Stop(); }

  Status Init() {
    if (opts_.socket_name.empty() || opts_.socket_name.find('/') != std::string::npos) {
      return Error::Make(Error::Code::kInvalidArgument,
                         "socket name \"" + opts_.socket_name + "\" must be a plain file name");
    }
    inotify_fd_ = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    stop_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (inotify_fd_ < 0 || stop_fd_ < 0) {
      return Error::Make(Error::Code::kInternal,
                         std::string("inotify/eventfd: ") + std::strerror(errno));
    }
    plugin_wd_ = ::inotify_add_watch(inotify_fd_, opts_.plugin_dir.c_str(),
                                     IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO);
    if (plugin_wd_ < 0) {
      return Error::Make(Error::Code::kInvalidArgument, "cannot watch the device plugin folder \"" +
                                                            opts_.plugin_dir +
                                                            "\": " + std::strerror(errno));
    }
    std::string dev = Join(opts_.root, "dev");
    dev_wd_ = ::inotify_add_watch(inotify_fd_, dev.c_str(), kDevMask);
    if (dev_wd_ < 0) {
      return Error::Make(Error::Code::kInvalidArgument,
                         "cannot watch the device folder \"" + dev + "\": " + std::strerror(errno));
    }
    WatchVfio();
    table_.Rescan();
    HS_RETURN_IF_ERROR(StartServer());
    loop_ = std::thread([this] { Loop(); });
    return OkStatus();
  }

  void Stop() override {
    std::lock_guard lock(stop_mu_);
    if (stopped_) return;
    stopped_ = true;
    if (loop_.joinable()) {
      uint64_t one = 1;
      (void)!::write(stop_fd_, &one, sizeof one);
      loop_.join();
    }
    StopRetired();
    StopServer(current_);
    if (own_socket_ && Identify(socket_path_) == own_socket_) ::unlink(socket_path_.c_str());
    if (inotify_fd_ >= 0) ::close(inotify_fd_);
    if (stop_fd_ >= 0) ::close(stop_fd_);
    inotify_fd_ = stop_fd_ = -1;
    log::Info("device plugin stopped", {{"socket", socket_path_}});
  }

  PluginStatus CurrentStatus() const override {
    PluginStatus s;
    table_.Fill(s);
    s.serve_generation = serve_generation_.load();
    s.registrations = registrations_.load();
    s.socket_path = socket_path_;
    return s;
  }

 private:
  static constexpr uint32_t kDevMask =
      IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_ATTRIB;

  // One gRPC server on the plugin socket and its service.
  struct Serving {
    std::unique_ptr<TpuService> service;
    std::unique_ptr<grpc::Server> server;
  };

  void WatchVfio() {
    if (vfio_wd_ >= 0) return;
    std::string vfio = Join(opts_.root, "dev/vfio");
    vfio_wd_ = ::inotify_add_watch(inotify_fd_, vfio.c_str(), kDevMask);
  }

  Status StartServer() {
    ::unlink(socket_path_.c_str());
    auto service = std::make_unique<TpuService>(&table_);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix:" + socket_path_, grpc::InsecureServerCredentials());
    builder.RegisterService(service.get());
    std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
    if (!server) {
      return Error::Make(Error::Code::kUnavailable,
                         "cannot serve the device plugin on unix:" + socket_path_);
    }
    current_ = Serving{std::move(service), std::move(server)};
    own_socket_ = Identify(socket_path_);
    int gen = ++serve_generation_;
    log::Info("device plugin serving", {{"socket", socket_path_}, {"generation", gen}});
    return OkStatus();
  }

  static void StopServer(Serving& s) {
    if (!s.server) return;
    s.service->Stop();
    s.server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    s.server->Wait();
    s.server.reset();
    s.service.reset();
  }

  // Servers whose socket file was removed serve only connections made before; once a newer
  // kubelet instance has registered (on the current server), nobody can still use them.
  void StopRetired() {
    if (retired_.empty()) return;
    log::Info("stopping device plugin servers left from before the socket was re-created",
              {{"servers", static_cast<int64_t>(retired_.size())}});
    for (Serving& s : retired_) StopServer(s);
    retired_.clear();
  }

  bool OwnSocketIntact() const {
    return current_.server && own_socket_ && Identify(socket_path_) == own_socket_;
  }

  // Serves the socket path again. The old server keeps its connections (the kubelet's
  // ListAndWatch stream among them): ending them would make kubelet mark every device Unhealthy.
  void ServeAgain() {
    log::Info("device plugin socket removed; serving it again", {{"socket", socket_path_}});
    if (current_.server) retired_.push_back(std::move(current_));
    current_ = Serving{};
    own_socket_.reset();
    Status st = StartServer();
    if (!st.ok()) {
      log::Error("device plugin server restart failed", {{"error", st.error().message}});
    }
  }

  // Registers with the kubelet instance listening on kubelet.sock; returns that instance's
  // identity, proven by connecting to it ourselves (see ConnectProven).
  Result<FileId> Register() {
    Result<UnixConnection> conn = ConnectProven(kubelet_path_);
    if (!conn.ok()) return Unexpected(conn.error());
    // The channel owns the descriptor from here on. Authority "localhost", as kubelet's own
    // plugin client uses (devicemanager/plugin/v1beta1/client.go); a channel made from a
    // descriptor would otherwise send a placeholder.
    grpc::ChannelArguments args;
    args.SetString(GRPC_ARG_DEFAULT_AUTHORITY, "localhost");
    auto channel = grpc::CreateCustomInsecureChannelFromFd("unix:" + kubelet_path_, conn->fd, args);
    auto stub = v1beta1::Registration::NewStub(channel);
    v1beta1::RegisterRequest req;
    req.set_version(kApiVersion);
    req.set_endpoint(opts_.socket_name);
    req.set_resource_name(opts_.resource_name);
    req.mutable_options()->set_pre_start_required(false);
    req.mutable_options()->set_get_preferred_allocation_available(true);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + opts_.register_timeout);
    v1beta1::Empty resp;
    grpc::Status st = stub->Register(&ctx, req, &resp);
    if (!st.ok()) {
      return Error::Make(Error::Code::kUnavailable,
                         "Register: code " + std::to_string(static_cast<int>(st.error_code())) +
                             ": " + st.error_message());
    }
    int n = ++registrations_;
    log::Info(
        "registered with kubelet",
        {{"resource", opts_.resource_name}, {"endpoint", opts_.socket_name}, {"registrations", n}});
    return conn->file;
  }

  struct Events {
    bool devices = false;
    bool plugin_dir = false;  // kubelet.sock or our socket came or went
    bool overflow = false;
  };

  Events DrainInotify() {
    Events ev;
    alignas(struct inotify_event) char buf[16384];
    for (;;) {
      ssize_t n = ::read(inotify_fd_, buf, sizeof buf);
      if (n <= 0) break;
      for (char* p = buf; p < buf + n;) {
        auto* e = reinterpret_cast<struct inotify_event*>(p);
        p += sizeof(struct inotify_event) + e->len;
        std::string_view name = e->len > 0 ? std::string_view(e->name) : std::string_view();
        if (e->mask & IN_Q_OVERFLOW) {
          ev.devices = ev.overflow = true;
          continue;
        }
        if (e->wd == plugin_wd_) {
          // Our own socket's creation is our doing; other plugins' sockets are not our business.
          bool own_gone =
              name == opts_.socket_name && (e->mask & (IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO));
          if (own_gone || name == opts_.kubelet_socket_name) ev.plugin_dir = true;
        } else if (e->wd == dev_wd_) {
          // Any name: a chip node may be a symlink to another node of /dev. /dev changes rarely
          // and a re-scan costs a few stat/open calls.
          ev.devices = true;
        } else if (vfio_wd_ >= 0 && e->wd == vfio_wd_) {
          ev.devices = true;
          if (e->mask & IN_IGNORED) vfio_wd_ = -1;
        }
      }
    }
    return ev;
  }

  // Brings serving and registration in line with what the plugin folder holds now. Returns when
  // to try again (a failed registration), or nullopt when only an event or the backstop can
  // change anything.
  std::optional<Clock::time_point> Reconcile() {
    if (!OwnSocketIntact()) ServeAgain();
    if (!current_.server) return std::nullopt;  // the backstop retries serving
    std::optional<FileId> kubelet = Identify(kubelet_path_);
    if (!kubelet) return std::nullopt;  // kubelet.sock's creation wakes us
    if (kubelet == registered_kubelet_) return std::nullopt;
    auto now = Clock::now();
    if (kubelet != failed_kubelet_) {
      // A kubelet instance not tried before: at once, with a fresh backoff.
      failed_kubelet_ = kubelet;
      backoff_ = kBackoffMin;
      next_register_ = now;
    }
    if (now < next_register_) return next_register_;
    // The kubelet dials our socket inside Register: if it went while we looked at kubelet.sock,
    // serve it first (next pass, at once) rather than let that dial wait out our deadline.
    if (!OwnSocketIntact()) return now;
    Result<FileId> registered = Register();
    if (registered.ok()) {
      registered_kubelet_ = *registered;
      failed_kubelet_.reset();
      StopRetired();
      return std::nullopt;
    }
    log::Warn("registration with kubelet failed; will retry",
              {{"kubelet_socket", kubelet_path_},
               {"error", registered.error().message},
               {"retry_ms", static_cast<int64_t>(backoff_.count())}});
    if (registered.error().code == Error::Code::kConflict) {
      failed_kubelet_.reset();  // replaced while connecting: a new instance, try it at once
      return Clock::now();
    }
    next_register_ = Clock::now() + backoff_;
    backoff_ = std::min(backoff_ * 2, kBackoffMax);
    return next_register_;
  }

  void Loop() {
    constexpr Clock::time_point kNever = Clock::time_point::max();
    auto next_rescan = Clock::now() + opts_.rescan_interval;
    // Plugin-folder events not acted on yet are acted on at settle_at: kSettle after the latest,
    // at most kSettleMax after the first. kNever: none pending.
    Clock::time_point settle_at = kNever, settle_limit = kNever;
    Clock::time_point retry_at = Clock::now();  // the first registration
    for (;;) {
      auto wake = std::min({next_rescan, settle_at, retry_at});
      int64_t wait_ms =
          std::chrono::duration_cast<std::chrono::milliseconds>(wake - Clock::now()).count();
      int timeout_ms = static_cast<int>(std::clamp<int64_t>(wait_ms + 1, 0, 60000));
      struct pollfd fds[2] = {{inotify_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
      int r = ::poll(fds, 2, timeout_ms);
      if (r < 0 && errno != EINTR) {
        log::Error("device plugin watcher poll failed", {{"error", std::strerror(errno)}});
        return;
      }
      if (fds[1].revents & POLLIN) return;
      Events ev = DrainInotify();
      auto now = Clock::now();
      bool backstop = now >= next_rescan;
      if (backstop) next_rescan = now + opts_.rescan_interval;

      if (ev.devices || backstop) {
        WatchVfio();
        table_.Rescan();
      }
      if (ev.plugin_dir) {
        if (settle_limit == kNever) settle_limit = now + kSettleMax;
        settle_at = std::min(now + kSettle, settle_limit);
      }
      bool settled = now >= settle_at;
      bool retry_due = now >= retry_at && settle_at == kNever;
      if (!(settled || retry_due || backstop || ev.overflow)) continue;
      settle_at = settle_limit = kNever;
      retry_at = Reconcile().value_or(kNever);
    }
  }

  const Options opts_;
  DeviceTable table_;
  const std::string socket_path_;
  const std::string kubelet_path_;

  int inotify_fd_ = -1;
  int stop_fd_ = -1;
  int plugin_wd_ = -1;
  int dev_wd_ = -1;
  int vfio_wd_ = -1;

  // Owned by the loop thread after Init, and by Stop after the loop has joined.
  Serving current_;
  std::vector<Serving> retired_;
  std::optional<FileId> own_socket_;
  std::optional<FileId> registered_kubelet_;  // the kubelet instance we are registered with
  std::optional<FileId> failed_kubelet_;      // the instance the backoff below applies to
  Clock::time_point next_register_{};
  std::chrono::milliseconds backoff_ = kBackoffMin;

  std::atomic<int> serve_generation_{0};
  std::atomic<int> registrations_{0};
  std::thread loop_;
  std::mutex stop_mu_;
  bool stopped_ = false;
};

}  // namespace

Result<std::unique_ptr<DevicePlugin>> DevicePlugin::Start(Options options) {
  auto plugin = std::make_unique<PluginImpl>(std::move(options));
  Status st = plugin->Init();
  if (!st.ok()) return Unexpected(st.error());
  return std::unique_ptr<DevicePlugin>(std::move(plugin));
}

}  // namespace hyperslice::deviceplugin
