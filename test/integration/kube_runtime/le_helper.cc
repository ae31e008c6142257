// kube_runtime_le_helper: one candidate process for the two-process leader-election test.
//
// Runs a Manager with Lease leader election and one controller whose reconcile appends
//   "<pid> <start-ns> <end-ns>\n"
// (CLOCK_REALTIME nanoseconds, one O_APPEND write per line) to --log, then asks to run again
// shortly, so the leader reconciles continuously. Exits 0 after SIGTERM/SIGINT (graceful, Lease
// released), 1 when leadership is lost, 2 on bad usage or set-up failure.
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "src/base/log.h"
#include "src/kube/client.h"
#include "src/kube/config.h"
#include "src/kube/controller.h"
#include "src/kube/manager.h"

namespace {

using namespace hyperslice;  // NOLINT(google-build-using-namespace): test helper

int64_t WallNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Seeds the controller's queue once it starts (i.e. once this process leads).
class Seeder final : public kube::Runnable {
 public:
  explicit Seeder(std::shared_ptr<kube::Controller> c) : c_(std::move(c)) {}
  std::string Name() const override { return "seeder"; }
  Status Start() override {
    c_->Enqueue("default/tick");
    return OkStatus();
  }
  void Stop(std::chrono::milliseconds) override {}

 private:
  std::shared_ptr<kube::Controller> c_;
};

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> args;
  for (int i = 1; i + 1 < argc; i += 2) args[argv[i]] = argv[i + 1];
  for (const char* required : {"--kubeconfig", "--namespace", "--lease", "--log"}) {
    if (!args.count(required)) {
      std::fprintf(stderr,
                   "usage: %s --kubeconfig FILE --namespace NS --lease NAME --log FILE "
                   "[--lease-ms N --renew-ms N --retry-ms N --reconcile-ms N]\n",
                   argv[0]);
      return 2;
    }
  }
  auto ms = [&](const char* key, int64_t def) {
    return std::chrono::milliseconds(args.count(key) ? std::stoll(args[key]) : def);
  };
  const auto reconcile_time = ms("--reconcile-ms", 30);

  int fd = open(args["--log"].c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    std::perror("open --log");
    return 2;
  }
  auto config = kube::LoadKubeconfig(args["--kubeconfig"]);
  if (!config.ok()) {
    std::fprintf(stderr, "kubeconfig: %s\n", config.error().ToString().c_str());
    return 2;
  }
  auto client = kube::Client::Create(*config);
  if (!client.ok()) {
    std::fprintf(stderr, "client: %s\n", client.error().ToString().c_str());
    return 2;
  }

  kube::ManagerOptions mo;
  mo.client = *client;
  mo.leader_election = true;
  mo.leader_election_namespace = args["--namespace"];
  mo.leader_election_id = args["--lease"];
  mo.identity = "helper-" + std::to_string(getpid());
  mo.lease_duration = ms("--lease-ms", 4000);
  mo.renew_deadline = ms("--renew-ms", 3000);
  mo.retry_period = ms("--retry-ms", 1000);
  mo.handle_signals = true;
  mo.graceful_shutdown_timeout = std::chrono::milliseconds(5000);
  auto manager = kube::Manager::Create(std::move(mo));
  if (!manager.ok()) {
    std::fprintf(stderr, "manager: %s\n", manager.error().ToString().c_str());
    return 2;
  }

  const int pid = getpid();
  kube::ControllerOptions co;
  co.name = "le-test";
  auto controller = std::make_shared<kube::Controller>(
      std::move(co), [&](const std::string&) -> Result<kube::ReconcileResult> {
        int64_t start = WallNanos();
        std::this_thread::sleep_for(reconcile_time);
        int64_t end = WallNanos();
        char line[96];
        int n = std::snprintf(line, sizeof line, "%d %lld %lld\n", pid,
                              static_cast<long long>(start), static_cast<long long>(end));
        if (write(fd, line, static_cast<size_t>(n)) != n) {
          return Error::Make(Error::Code::kInternal, "short write to the log");
        }
        return kube::ReconcileResult{false, std::chrono::milliseconds(5)};
      });
  (*manager)->Add(controller);
  (*manager)->Add(std::make_shared<Seeder>(controller));
  Status s = (*manager)->Run();
  manager->reset();
  close(fd);
  if (!s.ok()) {
    std::fprintf(stderr, "manager stopped: %s\n", s.error().ToString().c_str());
    return 1;
  }
  return 0;
}
