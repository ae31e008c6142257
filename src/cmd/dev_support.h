// What the `hyperslice dev` stories (TPU: roles_dev.cc, GPU: roles_dev_gpu.cc, linked runners:
// roles_dev_runners.cc) need: their options, output, the log file, defaults, reading and applying
// the deploy/ folder, signals.
#pragma once

#include <signal.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <boost/json/object.hpp>

#include "src/base/result.h"
#include "src/kube/client.h"
#include "src/localcluster/localcluster.h"

namespace hyperslice::cmd::dev {

inline constexpr char kFieldManager[] = "hyperslice-dev";

// What RunDev hands a story of its own (--example gpu, runners) from its flags.
struct StoryOptions {
  std::string work_dir, bin_dir, deploy_dir;
  int timeout_s = 600;           // --ready-timeout: for the whole story
  bool exit_when_ready = false;  // --exit-when-ready: stop once the story has run
  bool log_to_stderr = false;
  sigset_t stop_signals{};  // blocked by the caller; SIGINT/SIGTERM stop the story
};

// While it lives, log lines go to <dir>/hyperslice.log (appended, each flushed) instead of
// stderr: components log JSON lines, the terminal shows the story. Declared before the components
// so that their shutdown still logs to the file; its end gives the log back to stderr.
class LogFile {
 public:
  explicit LogFile(const std::string& dir);
  ~LogFile();
  LogFile(const LogFile&) = delete;
  LogFile& operator=(const LogFile&) = delete;
};

// printf to stdout, flushed (the terminal shows progress; components log to a file).
__attribute__((format(printf, 1, 2))) void Say(const char* fmt, ...);

// ${XDG_CACHE_HOME:-~/.cache}/hyperslice/dev.
std::string DefaultWorkDir();
// $HYPERSLICE_DEPLOY_DIR, else the source tree's deploy/, else "deploy".
std::string DefaultDeployDir();

// KEY=VALUE lines of an example's .env file.
Result<std::map<std::string, std::string>> ReadEnvFile(const std::string& path);
// Every mapping document of a YAML text, as JSON objects; `what` names the text in errors.
Result<std::vector<boost::json::object>> YamlDocuments(const std::string& text,
                                                       const std::string& what);

// Server-side apply as the field manager "hyperslice-dev", forced.
Status ServerSideApply(kube::Client& client, const kube::Resource& r,
                       const boost::json::object& obj);
// Applies the CRDs <deploy>/crds/<group>_*.yaml and waits until each is Established.
Status ApplyCrds(kube::Client& client, const std::string& deploy_dir, const std::string& group,
                 int* count);

// `kubectl get <what> -A -o wide` as the user would run it (KUBECONFIG in the environment, so the
// work dir does not appear on kubectl's command line). Empty when kubectl is missing.
std::string KubectlGet(const std::string& kubeconfig, const std::string& what);

// The local control plane as both stories run it: etcd, kube-apiserver, kube-controller-manager
// (CSR signing, the Job controller, …) and kube-scheduler, with what `kubeadm init` leaves for
// nodes to join. Says what it starts; on failure prints why and returns nullptr.
std::unique_ptr<localcluster::LocalCluster> StartControlPlane(const std::string& work_dir,
                                                              const std::string& bin_dir);

// Waits up to `timeout` for one of `signals`; the signal number, or 0 on timeout.
int WaitForSignal(const sigset_t& signals, std::chrono::milliseconds timeout);

// "dev-" and 32 random hex digits (a static access token for the simulators).
std::string RandomToken();

}  // namespace hyperslice::cmd::dev
