#include "src/cmd/dev_support.h"

#include <time.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include <boost/json.hpp>

#include "src/base/envsubst.h"
#include "src/base/files.h"
#include "src/base/log.h"
#include "src/kube/object_helpers.h"
#include "src/kube/store.h"
#include "src/kube/yaml.h"

namespace hyperslice::cmd::dev {

namespace fs = std::filesystem;
namespace json = boost::json;
using Clock = std::chrono::steady_clock;

void Say(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  std::vprintf(fmt, args);
  va_end(args);
  std::fflush(stdout);
}

LogFile::LogFile(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  auto file = std::make_shared<std::ofstream>(dir + "/hyperslice.log", std::ios::app);
  auto mu = std::make_shared<std::mutex>();
  log::SetSink([file, mu](std::string_view line) {
    std::lock_guard<std::mutex> lock(*mu);
    *file << line << (line.empty() || line.back() != '\n' ? "\n" : "");
    file->flush();
  });
}

LogFile::~LogFile() { log::SetSink(nullptr); }

std::string DefaultWorkDir() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  std::string cache;
  if (xdg && *xdg) {
    cache = xdg;
  } else {
    const char* home = std::getenv("HOME");
    cache = std::string(home && *home ? home : "/tmp") + "/.cache";
  }
  return cache + "/hyperslice/dev";
}

std::string DefaultDeployDir() {
  const char* env = std::getenv("HYPERSLICE_DEPLOY_DIR");
  if (env && *env) return env;
#ifdef HS_SOURCE_DIR
  if (fs::exists(std::string(HS_SOURCE_DIR) + "/deploy/crds")) {
    return std::string(HS_SOURCE_DIR) + "/deploy";
  }
#endif
  return "deploy";
}

// KEY=VALUE lines of an example's .env file.
Result<std::map<std::string, std::string>> ReadEnvFile(const std::string& path) {
  HS_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  return ParseEnvFile(text);
}

// Every mapping document of a YAML text, as JSON objects; `what` names the text in errors.
Result<std::vector<json::object>> YamlDocuments(const std::string& text, const std::string& what) {
  Result<std::vector<json::object>> docs = kube::ObjectsFromYaml(text);
  if (!docs.ok()) {
    return Error::Make(Error::Code::kInvalidArgument, what + ": " + docs.error().message,
                       "InvalidYAML");
  }
  return docs;
}

Status ServerSideApply(kube::Client& client, const kube::Resource& r, const json::object& obj) {
  std::string ns(r.namespaced ? kube::MetaString(obj, "namespace") : "");
  std::string name(kube::MetaString(obj, "name"));
  kube::PatchOptions opts;
  opts.field_manager = kFieldManager;
  opts.force = true;
  auto applied = client.Patch(r, ns, name, kube::PatchType::kApply, json::serialize(obj), opts);
  if (!applied.ok()) return applied.error();
  return OkStatus();
}

// Applies every CRD under <deploy>/crds and waits until each is Established.
Status ApplyCrds(kube::Client& client, const std::string& deploy_dir, const std::string& group,
                 int* count) {
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(deploy_dir + "/crds", ec)) {
    std::string name = entry.path().filename();
    if (name.rfind(group + "_", 0) == 0 && entry.path().extension() == ".yaml") {
      files.push_back(entry.path());
    }
  }
  if (ec || files.empty()) {
    return Error::Make(Error::Code::kNotFound, "no CRDs in " + deploy_dir + "/crds", "NoCRDs");
  }
  std::vector<std::string> names;
  for (const auto& file : files) {
    HS_ASSIGN_OR_RETURN(std::string text, ReadFile(file));
    HS_ASSIGN_OR_RETURN(auto docs, YamlDocuments(text, file));
    for (const auto& doc : docs) {
      HS_RETURN_IF_ERROR(
          ServerSideApply(client, kube::resources::CustomResourceDefinitions(), doc));
      names.emplace_back(kube::MetaString(doc, "name"));
    }
  }
  auto deadline = Clock::now() + std::chrono::seconds(60);
  for (const auto& name : names) {
    while (true) {
      auto crd = client.Get(kube::resources::CustomResourceDefinitions(), "", name);
      if (crd.ok() && kube::IsConditionTrue(*crd, "Established")) break;
      if (Clock::now() > deadline) {
        return Error::Make(Error::Code::kTimeout, "CRD " + name + " not Established within 60 s");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  *count = static_cast<int>(names.size());
  return OkStatus();
}

std::string KubectlGet(const std::string& kubeconfig, const std::string& what) {
  const char* env = std::getenv("KUBECTL");
  std::string kubectl = env && *env ? env : "kubectl";
  if (std::system(("command -v " + kubectl + " >/dev/null 2>&1").c_str()) != 0) return "";
  ::setenv("KUBECONFIG", kubeconfig.c_str(), 1);
  std::string out;
  FILE* p = ::popen((kubectl + " get " + what + " -A -o wide 2>&1").c_str(), "r");
  if (p == nullptr) return "";
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  ::pclose(p);
  return out;
}

// Waits up to `timeout` for SIGINT/SIGTERM; the signal number, or 0 on timeout.
std::unique_ptr<localcluster::LocalCluster> StartControlPlane(const std::string& work_dir,
                                                              const std::string& bin_dir) {
  localcluster::Options options;
  options.work_dir = work_dir;
  options.bin_dir = bin_dir;
  options.controller_manager = true;
  options.kubeadm_bootstrap = true;
  options.scheduler = true;
  Say("hyperslice dev: starting the control plane (etcd, kube-apiserver, "
      "kube-controller-manager, kube-scheduler)...\n");
  auto cluster = localcluster::LocalCluster::Start(options);
  if (!cluster.ok()) {
    std::fprintf(stderr, "hyperslice dev: the control plane did not start: %s\n",
                 cluster.error().ToString().c_str());
    return nullptr;
  }
  return std::move(cluster).value();
}

int WaitForSignal(const sigset_t& signals, std::chrono::milliseconds timeout) {
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(timeout.count() / 1000);
  ts.tv_nsec = static_cast<long>((timeout.count() % 1000) * 1000000);
  int sig = sigtimedwait(&signals, nullptr, &ts);
  return sig > 0 ? sig : 0;
}

std::string RandomToken() {
  std::random_device rd;
  std::string t = "dev-";
  const char* hex = "0123456789abcdef";
  for (int i = 0; i < 32; ++i) t += hex[rd() % 16];
  return t;
}

}  // namespace hyperslice::cmd::dev
