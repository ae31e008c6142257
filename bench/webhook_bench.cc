// Admission throughput and latency of `hyperslice webhook` for a StatefulSet pod AdmissionReview,
// over TLS with keep-alive on loopback. Owners are served from memory, as the informer cache
// serves them in production (the hot path makes no API call).
//
//   webhook_bench [--seconds=10] [--rate=2000] [--connections=32] [--io-threads=2]
//                 [--go-webhook=PATH]   (bench/go-webhook built with `go build`)
//
// Two measurements per server:
//  - fixed rate (open loop, C++ load generator on net::HttpClient): --rate requests/s spread over
//    4 keep-alive connections; each latency is measured from the request's scheduled send time,
//    so a stall is not hidden by the generator waiting (no coordinated omission);
//  - maximum throughput: `wrk` (Debian) with a Lua script POSTing the body, --connections
//    keep-alive connections, one wrk thread; without wrk, a closed-loop C++ generator.
// Prints the figures; asserts nothing about them.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <boost/json.hpp>

#include "src/net/http.h"
#include "src/net/pki.h"
#include "src/webhook/webhook.h"
#include "test/unit/webhook/review_fixtures.h"

namespace hs = hyperslice;
namespace json = boost::json;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

struct Flags {
  int seconds = 10;
  int rate = 2000;
  int connections = 32;
  int io_threads = 2;
  std::string go_webhook;
};

std::string Arg(int argc, char** argv, const std::string& name, const std::string& def) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--" + name + "=", 0) == 0) return a.substr(name.size() + 3);
  }
  return def;
}

// Seed 000's StatefulSet pod (worker 1 of tpu-worker-v7x) selecting a 2x2x2 tpu7x group.
std::string PodReviewBody() {
  using namespace hs::webhook::testing;
  json::object c = Container("tpu-job", 4,
                             {{"JAX_PLATFORMS", "tpu"},
                              {"JAX_PROCESS_COUNT", "2"},
                              {"VBAR_CONTROL_SERVICE_URL", "127.0.0.1:8353"},
                              {"TPU_PROCESS_PORT", "8470"},
                              {"TPU_RUNTIME_METRICS_PORTS", "8431,8432,8433,8434"}});
  c["command"] = json::array{"python3", "-c", std::string(1500, 'x')};  // the seed's script size
  c["securityContext"] = json::object{{"privileged", true}};
  json::object pod = Pod("ns1", "tpu-worker-v7x-1", {c});
  SetOwner(pod, "apps/v1", "StatefulSet", "tpu-worker-v7x", "sts-uid");
  SetLabel(pod, "app", "tpu-worker-v7x");
  SetLabel(pod, "apps.kubernetes.io/pod-index", "1");
  SetLabel(pod, "statefulset.kubernetes.io/pod-name", "tpu-worker-v7x-1");
  SetLabel(pod, "controller-revision-hash", "tpu-worker-v7x-5d4f8c7b9");
  json::object& spec = pod["spec"].as_object();
  spec["hostNetwork"] = true;
  spec["dnsPolicy"] = "ClusterFirstWithHostNet";
  spec["hostname"] = "tpu-worker-v7x-1";
  spec["subdomain"] = "tpu-svc-v7x";
  spec["nodeSelector"] = json::object{{"cloud.google.com/tpu-node-group", "ns1-my-group"},
                                      {"cloud.google.com/gke-tpu-topology", "2x2x2"},
                                      {"cloud.google.com/gke-tpu-accelerator", "tpu7x"}};
  spec["tolerations"] = json::array{
      json::object{{"key", "google.com/tpu"}, {"operator", "Exists"}, {"effect", "NoSchedule"}}};
  return Review(pod, "3f0c7d5e-8a7b-4c1e-9d2f-6b5a4c3d2e1f");
}

struct Figures {
  double rate = 0;  // completed requests per second
  double p50_ms = 0, p99_ms = 0, max_ms = 0;
  long errors = 0;
  std::string how;
};

double Percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  size_t k = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<long>(k), v.end());
  return v[k];
}

std::shared_ptr<hs::net::HttpClient> NewClient(uint16_t port, const std::string& ca) {
  hs::net::HttpClient::Options o;
  o.base_url = "https://127.0.0.1:" + std::to_string(port);
  o.tls.ca_pem = ca;
  return *hs::net::HttpClient::Create(o);
}

hs::net::Request PostRequest(const std::string& body) {
  hs::net::Request r;
  r.method = "POST";
  r.target = "/mutate-pods";
  r.headers = {{"Content-Type", "application/json"}};
  r.body = body;
  r.timeout = 10s;
  return r;
}

bool GoodAnswer(const hs::Result<hs::net::Response>& res) {
  return res.ok() && res->status == 200 && res->body.find("\"patch\"") != std::string::npos;
}

Figures FixedRate(uint16_t port, const std::string& ca, const std::string& body, int rate,
                  int seconds) {
  const int kConnections = 4;
  std::vector<std::vector<double>> lat(kConnections);
  std::atomic<long> errors{0};
  Clock::time_point start = Clock::now() + 200ms;
  std::chrono::nanoseconds interval(1'000'000'000LL * kConnections / rate);
  long per_conn = static_cast<long>(rate) * seconds / kConnections;
  std::vector<std::thread> threads;
  for (int t = 0; t < kConnections; ++t) {
    threads.emplace_back([&, t] {
      auto client = NewClient(port, ca);
      hs::net::Request req = PostRequest(body);
      (void)client->Do(req);  // open the keep-alive connection before the clock starts
      lat[t].reserve(static_cast<size_t>(per_conn));
      for (long k = 0; k < per_conn; ++k) {
        Clock::time_point due = start + interval * k + interval * t / kConnections;
        std::this_thread::sleep_until(due);
        auto res = client->Do(req);
        if (!GoodAnswer(res)) errors++;
        lat[t].push_back(std::chrono::duration<double, std::milli>(Clock::now() - due).count());
      }
    });
  }
  for (auto& th : threads) th.join();
  double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  std::vector<double> all;
  for (auto& v : lat) all.insert(all.end(), v.begin(), v.end());
  Figures f;
  f.rate = static_cast<double>(all.size()) / elapsed;
  f.max_ms = all.empty() ? 0 : *std::max_element(all.begin(), all.end());
  f.p50_ms = Percentile(all, 0.50);
  f.p99_ms = Percentile(all, 0.99);
  f.errors = errors;
  f.how = "open loop, 4 keep-alive TLS connections, C++ generator";
  return f;
}

std::string WrkPath() {
  for (const char* dir : {"/usr/bin/wrk", "/usr/local/bin/wrk"}) {
    if (access(dir, X_OK) == 0) return dir;
  }
  return "";
}

double ParseMs(const std::string& v, const std::string& unit) {
  double x = std::stod(v);
  if (unit == "us") return x / 1000;
  if (unit == "s") return x * 1000;
  return x;
}

Figures MaxThroughputWrk(const std::string& wrk, uint16_t port, const std::string& body_file,
                         int connections, int seconds, const std::string& dir) {
  std::string script = dir + "/post.lua";
  std::ofstream(script) << "wrk.method = \"POST\"\n"
                           "wrk.headers[\"Content-Type\"] = \"application/json\"\n"
                           "local f = assert(io.open(\""
                        << body_file << "\", \"rb\"))\nwrk.body = f:read(\"*a\")\nf:close()\n";
  std::string cmd = wrk + " -t1 -c" + std::to_string(connections) + " -d" +
                    std::to_string(seconds) + "s --latency -s " + script +
                    " https://127.0.0.1:" + std::to_string(port) + "/mutate-pods 2>&1";
  std::string out;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
    pclose(p);
  }
  Figures f;
  std::smatch m;
  if (std::regex_search(out, m, std::regex(R"(Requests/sec:\s+([0-9.]+))"))) {
    f.rate = std::stod(m[1]);
  }
  if (std::regex_search(out, m, std::regex(R"(50%\s+([0-9.]+)(us|ms|s))"))) {
    f.p50_ms = ParseMs(m[1], m[2]);
  }
  if (std::regex_search(out, m, std::regex(R"(99%\s+([0-9.]+)(us|ms|s))"))) {
    f.p99_ms = ParseMs(m[1], m[2]);
  }
  if (std::regex_search(out, m,
                        std::regex(R"(Latency\s+[0-9.]+\w+\s+[0-9.]+\w+\s+([0-9.]+)(us|ms|s))"))) {
    f.max_ms = ParseMs(m[1], m[2]);
  }
  if (std::regex_search(out, m, std::regex(R"(Non-2xx or 3xx responses:\s+([0-9]+))"))) {
    f.errors = std::stol(m[1]);
  }
  if (f.rate == 0) std::fprintf(stderr, "wrk output:\n%s\n", out.c_str());
  f.how = "wrk -t1 -c" + std::to_string(connections) + " (keep-alive TLS, Lua POST)";
  return f;
}

Figures MaxThroughputClosedLoop(uint16_t port, const std::string& ca, const std::string& body,
                                int connections, int seconds) {
  std::vector<std::vector<double>> lat(static_cast<size_t>(connections));
  std::atomic<long> errors{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  Clock::time_point start = Clock::now();
  for (int t = 0; t < connections; ++t) {
    threads.emplace_back([&, t] {
      auto client = NewClient(port, ca);
      hs::net::Request req = PostRequest(body);
      while (!stop) {
        Clock::time_point s = Clock::now();
        if (!GoodAnswer(client->Do(req))) errors++;
        lat[t].push_back(std::chrono::duration<double, std::milli>(Clock::now() - s).count());
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::seconds(seconds));
  stop = true;
  for (auto& th : threads) th.join();
  double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  std::vector<double> all;
  for (auto& v : lat) all.insert(all.end(), v.begin(), v.end());
  Figures f;
  f.rate = static_cast<double>(all.size()) / elapsed;
  f.p50_ms = Percentile(all, 0.5);
  f.p99_ms = Percentile(all, 0.99);
  f.max_ms = all.empty() ? 0 : *std::max_element(all.begin(), all.end());
  f.errors = errors;
  f.how = "closed loop, " + std::to_string(connections) + " keep-alive TLS connections (no wrk)";
  return f;
}

void Print(const char* server, const char* what, const Figures& f) {
  std::printf(
      "%-10s %-14s %10.0f req/s  p50 %7.3f ms  p99 %7.3f ms  max %8.3f ms  errors %ld  [%s]\n",
      server, what, f.rate, f.p50_ms, f.p99_ms, f.max_ms, f.errors, f.how.c_str());
  std::fflush(stdout);
}

// Share of admissions the server itself handled (receive to answer, queueing in the load generator
// and the kernel excluded) within 0.5 ms and 1 ms, from its latency histogram.
void PrintServerSide(const std::string& metrics) {
  auto count = [&](const std::string& le) -> double {
    std::istringstream lines(metrics);
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind("controller_runtime_webhook_latency_seconds_bucket{", 0) == 0 &&
          line.find("webhook=\"/mutate-pods\"") != std::string::npos &&
          line.find("le=\"" + le + "\"") != std::string::npos) {
        return std::stod(line.substr(line.rfind(' ') + 1));
      }
    }
    return 0;
  };
  double all = count("+Inf"), half = count("0.0005"), one = count("0.001");
  if (all > 0) {
    std::printf(
        "hyperslice server-side handling (its own histogram, %.0f admissions): "
        "%.1f%% <= 0.5 ms, %.1f%% <= 1 ms\n",
        all, 100 * half / all, 100 * one / all);
  }
}

std::string LoadAverage() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return a + " " + b + " " + c;
}

// Starts the Go webhook; returns its pid and port.
std::pair<pid_t, uint16_t> StartGo(const std::string& bin, const std::string& cert,
                                   const std::string& key) {
  int fds[2];
  if (pipe(fds) != 0) return {-1, 0};
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 1);
    close(fds[0]);
    setenv("GOMAXPROCS", "2", 1);
    execl(bin.c_str(), bin.c_str(), ("-tls-cert-file=" + cert).c_str(),
          ("-tls-key-file=" + key).c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(fds[1]);
  std::string line;
  char c;
  while (read(fds[0], &c, 1) == 1 && c != '\n') line += c;
  close(fds[0]);
  int port = 0;
  if (std::sscanf(line.c_str(), "port %d", &port) != 1) return {pid, 0};
  return {pid, static_cast<uint16_t>(port)};
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  flags.seconds = std::stoi(Arg(argc, argv, "seconds", "10"));
  flags.rate = std::stoi(Arg(argc, argv, "rate", "2000"));
  flags.connections = std::stoi(Arg(argc, argv, "connections", "32"));
  flags.io_threads = std::stoi(Arg(argc, argv, "io-threads", "2"));
  flags.go_webhook = Arg(argc, argv, "go-webhook", "");

  std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("hs-webhook-bench-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  auto ca = hs::net::pki::MakeCa("bench-ca");
  hs::net::pki::CertRequest req;
  req.common_name = "webhook";
  req.ip_addresses = {"127.0.0.1"};
  req.server = true;
  auto kp = hs::net::pki::Issue(*ca, req);
  std::string cert = (dir / "tls.crt").string(), key = (dir / "tls.key").string();
  std::ofstream(cert) << kp->cert_pem;
  std::ofstream(key) << kp->key_pem;
  std::string body = PodReviewBody();
  std::string body_file = (dir / "review.json").string();
  std::ofstream(body_file) << body;

  auto source = std::make_shared<hs::webhook::StaticObjectSource>();
  source->Put(
      hs::kube::resources::StatefulSets(),
      hs::webhook::testing::StatefulSet("ns1", "tpu-worker-v7x", "sts-uid", 2, "tpu-svc-v7x"));
  source->Put(hs::webhook::TPUNodeGroups(),
              hs::webhook::testing::NodeGroup("ns1", "my-group", "2x2x2", "tpu7x-standard-4t", 2));
  hs::webhook::ServerOptions o;
  o.tls_cert_file = cert;
  o.tls_key_file = key;
  o.io_threads = flags.io_threads;
  o.source = source;
  auto server = hs::webhook::Server::Start(std::move(o));
  if (!server.ok()) {
    std::fprintf(stderr, "server: %s\n", server.error().ToString().c_str());
    return 1;
  }
  std::printf(
      "webhook_bench: StatefulSet pod AdmissionReview of %zu bytes -> JSONPatch of 6 env "
      "vars; %d s per run; %u CPUs (load average %s); C++ server io-threads=%d\n",
      body.size(), flags.seconds, std::thread::hardware_concurrency(), LoadAverage().c_str(),
      flags.io_threads);
  uint16_t port = (*server)->port();
  {
    auto c = NewClient(port, ca->cert_pem);
    auto res = c->Do(PostRequest(body));
    if (!GoodAnswer(res)) {
      std::fprintf(stderr, "sanity request failed: %s\n",
                   res.ok() ? res->body.c_str() : res.error().ToString().c_str());
      return 1;
    }
  }
  std::string wrk = WrkPath();
  auto max_throughput = [&](uint16_t p) {
    return wrk.empty()
               ? MaxThroughputClosedLoop(p, ca->cert_pem, body, flags.connections, flags.seconds)
               : MaxThroughputWrk(wrk, p, body_file, flags.connections, flags.seconds,
                                  dir.string());
  };
  Figures cpp_fixed = FixedRate(port, ca->cert_pem, body, flags.rate, flags.seconds);
  Print("hyperslice", ("fixed " + std::to_string(flags.rate) + "/s").c_str(), cpp_fixed);
  Figures cpp_max = max_throughput(port);
  Print("hyperslice", "max", cpp_max);
  PrintServerSide((*server)->Metrics());
  (*server)->Stop(2s);

  if (!flags.go_webhook.empty()) {
    auto [pid, go_port] = StartGo(flags.go_webhook, cert, key);
    if (go_port == 0) {
      std::fprintf(stderr, "go webhook did not start\n");
    } else {
      auto c = NewClient(go_port, ca->cert_pem);
      if (!GoodAnswer(c->Do(PostRequest(body)))) std::fprintf(stderr, "go sanity request failed\n");
      Figures go_fixed = FixedRate(go_port, ca->cert_pem, body, flags.rate, flags.seconds);
      Print("go", ("fixed " + std::to_string(flags.rate) + "/s").c_str(), go_fixed);
      Figures go_max = max_throughput(go_port);
      Print("go", "max", go_max);
      if (go_max.rate > 0) {
        std::printf("throughput ratio hyperslice/go: %.2fx\n", cpp_max.rate / go_max.rate);
      }
    }
    if (pid > 0) {
      kill(pid, SIGTERM);
      waitpid(pid, nullptr, 0);
    }
  }
  std::filesystem::remove_all(dir);
  return 0;
}
