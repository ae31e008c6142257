// Test doubles for the device plugin, header-only so bench/ can use them too:
//  - FakeNode: a node's /dev and /sys in a temp dir (device nodes are plain files), and the kubelet
//    device-plugin folder next to them;
//  - TestKubelet: a gRPC Registration server written from the v1beta1 contract, serving
//    kubelet.sock and recording every RegisterRequest;
//  - Watch: a ListAndWatch client stream recording every update with its arrival time.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "src/deviceplugin/api.grpc.pb.h"

namespace hyperslice::deviceplugin::testing {

namespace fs = std::filesystem;
using SteadyClock = std::chrono::steady_clock;

class FakeNode {
 public:
  FakeNode() {
    char tmpl[] = "/tmp/hsdp-XXXXXX";  // short: unix socket paths are limited to 108 bytes
    char* made = ::mkdtemp(tmpl);
    base_ = made ? made : "";
    root_ = base_ + "/root";
    plugin_dir_ = base_ + "/kubelet";
    fs::create_directories(root_ + "/dev");
    fs::create_directories(plugin_dir_);
  }
  ~FakeNode() {
    std::error_code ec;
    fs::remove_all(base_, ec);
  }
  FakeNode(const FakeNode&) = delete;
  FakeNode& operator=(const FakeNode&) = delete;

  const std::string& root() const { return root_; }
  const std::string& plugin_dir() const { return plugin_dir_; }
  std::string kubelet_socket() const { return plugin_dir_ + "/kubelet.sock"; }

  // /dev/accel<n> plus /sys/class/accel/accel<n>/device -> a PCI function with its NUMA node.
  void AddAccelChip(int n, int numa_node) {
    std::string bdf = "0000:00:" + std::to_string(4 + n) + ".0";
    std::string pci = root_ + "/sys/bus/pci/devices/" + bdf;
    fs::create_directories(pci);
    Write(pci + "/vendor", "0x1ae0\n");
    Write(pci + "/numa_node", std::to_string(numa_node) + "\n");
    std::string cls = root_ + "/sys/class/accel/accel" + std::to_string(n);
    fs::create_directories(cls);
    fs::create_directory_symlink(pci, cls + "/device");
    Write(AccelPath(n), "");
  }
  std::string AccelPath(int n) const { return root_ + "/dev/accel" + std::to_string(n); }

  // A TPU (or other vendor's) PCI function bound to vfio in IOMMU group `group`.
  void AddVfioFunction(const std::string& bdf, int group, int numa_node,
                       const std::string& vendor = "0x1ae0", bool with_dev_node = true) {
    std::string pci = root_ + "/sys/bus/pci/devices/" + bdf;
    std::string groups = root_ + "/sys/kernel/iommu_groups/" + std::to_string(group);
    fs::create_directories(pci);
    fs::create_directories(groups);
    Write(pci + "/vendor", vendor + "\n");
    Write(pci + "/numa_node", std::to_string(numa_node) + "\n");
    fs::create_directory_symlink(groups, pci + "/iommu_group");
    fs::create_directories(root_ + "/dev/vfio");
    if (!fs::exists(root_ + "/dev/vfio/vfio")) Write(root_ + "/dev/vfio/vfio", "");
    if (with_dev_node) Write(VfioPath(group), "");
  }
  std::string VfioPath(int group) const { return root_ + "/dev/vfio/" + std::to_string(group); }

  static void Write(const std::string& path, const std::string& content) {
    std::ofstream(path) << content;
  }

 private:
  std::string base_;
  std::string root_;
  std::string plugin_dir_;
};

class TestKubelet {
 public:
  explicit TestKubelet(std::string socket_path) : path_(std::move(socket_path)) {}
  ~TestKubelet() { Stop(); }

  bool Start() {
    service_ = std::make_unique<Service>(this);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix:" + path_, grpc::InsecureServerCredentials());
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    return server_ != nullptr;
  }
  // Stops serving and removes kubelet.sock, as a stopping kubelet does.
  void Stop() {
    if (server_) {
      server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
      server_->Wait();
      server_.reset();
    }
    std::error_code ec;
    fs::remove(path_, ec);
  }

  // Waits until at least `n` registrations arrived; returns them all.
  std::vector<v1beta1::RegisterRequest> WaitForRegistrations(size_t n,
                                                             std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, timeout, [&] { return requests_.size() >= n; });
    return requests_;
  }
  size_t registrations() {
    std::lock_guard lock(mu_);
    return requests_.size();
  }

 private:
  class Service final : public v1beta1::Registration::Service {
   public:
    explicit Service(TestKubelet* k) : k_(k) {}
    grpc::Status Register(grpc::ServerContext*, const v1beta1::RegisterRequest* req,
                          v1beta1::Empty*) override {
      std::lock_guard lock(k_->mu_);
      k_->requests_.push_back(*req);
      k_->cv_.notify_all();
      return grpc::Status::OK;
    }

   private:
    TestKubelet* k_;
  };

  std::string path_;
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<v1beta1::RegisterRequest> requests_;
};

inline std::unique_ptr<v1beta1::DevicePlugin::Stub> DialPlugin(const std::string& socket_path) {
  return v1beta1::DevicePlugin::NewStub(
      grpc::CreateChannel("unix:" + socket_path, grpc::InsecureChannelCredentials()));
}

inline std::map<std::string, std::string> HealthById(const v1beta1::ListAndWatchResponse& r) {
  std::map<std::string, std::string> out;
  for (const auto& d : r.devices()) out[d.id()] = d.health();
  return out;
}

class Watch {
 public:
  struct Update {
    SteadyClock::time_point at;
    v1beta1::ListAndWatchResponse response;
  };

  explicit Watch(const std::string& socket_path) : stub_(DialPlugin(socket_path)) {
    reader_ = stub_->ListAndWatch(&ctx_, v1beta1::Empty());
    thread_ = std::thread([this] {
      v1beta1::ListAndWatchResponse resp;
      while (reader_->Read(&resp)) {
        std::lock_guard lock(mu_);
        updates_.push_back({SteadyClock::now(), resp});
        cv_.notify_all();
      }
      std::lock_guard lock(mu_);
      ended_ = true;
      cv_.notify_all();
    });
  }
  ~Watch() {
    ctx_.TryCancel();
    thread_.join();
    reader_->Finish().ok();
  }

  // Waits until an update at or after position `from` satisfies `pred`; returns it.
  std::optional<Update> WaitFor(
      const std::function<bool(const v1beta1::ListAndWatchResponse&)>& pred,
      std::chrono::milliseconds timeout, size_t from = 0) {
    std::unique_lock lock(mu_);
    std::optional<Update> hit;
    cv_.wait_for(lock, timeout, [&] {
      for (size_t i = from; i < updates_.size(); ++i) {
        if (pred(updates_[i].response)) {
          hit = updates_[i];
          return true;
        }
      }
      return ended_;
    });
    return hit;
  }
  size_t count() {
    std::lock_guard lock(mu_);
    return updates_.size();
  }
  bool WaitEnded(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return ended_; });
  }

 private:
  std::unique_ptr<v1beta1::DevicePlugin::Stub> stub_;
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReader<v1beta1::ListAndWatchResponse>> reader_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Update> updates_;
  bool ended_ = false;
};

}  // namespace hyperslice::deviceplugin::testing
