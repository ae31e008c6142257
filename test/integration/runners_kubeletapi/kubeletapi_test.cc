// The control node's kubelet API behind a real kube-apiserver, driven by the real kubectl: a Node
// whose InternalIP is 127.0.0.1 and whose kubeletEndpoint port is this server's, a Pod bound to
// it, and a scripted Backend. The apiserver reaches the server with its
// --kubelet-client-certificate (LocalCluster sets it); the server trusts the client CA read from
// kube-system/extension-apiserver-authentication, as a control node does.
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "src/kube/client.h"
#include "src/kube/resource.h"
#include "src/net/http.h"
#include "src/net/pki.h"
#include "src/runners/kubeletapi/kubeletapi.h"
#include "test/testenv/command.h"
#include "test/testenv/eventually.h"
#include "test/testenv/testenv.h"

namespace hyperslice::runners::kubeletapi {
namespace {

namespace bj = boost::json;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

// Logs: container "c" prints two lines (tailLines honoured), "ticks" streams three lines 150 ms
// apart, "forever" streams until the client goes away. Exec: `echo ARGS` prints its arguments,
// `fail N` prints to stderr and exits N, `cat` echoes stdin until EOF, `sealed` is refused before
// the upgrade, `refused-late` fails after it.
class ScriptedBackend final : public Backend {
 public:
  Status Logs(const std::string& ns, const std::string& pod, const std::string& container,
              const LogOptions& o, LogSink& sink) override {
    (void)ns;
    if (pod != "p") return Error::Make(Error::Code::kNotFound, "pod " + pod + " not found");
    last_tail = o.tail_lines.value_or(-1);
    if (container == "c") {
      if (o.tail_lines == 1) {
        sink.Write("line 2\n");
      } else {
        sink.Write("line 1\n");
        sink.Write("line 2\n");
      }
      return OkStatus();
    }
    if (container == "ticks") {
      for (int i = 0; i < 3; ++i) {
        if (!sink.Write("tick " + std::to_string(i) + "\n")) break;
        if (o.follow) sink.WaitCancelled(150ms);
      }
      return OkStatus();
    }
    if (container == "forever") {
      forever_started = true;
      for (int i = 0; !sink.Cancelled(); ++i) {
        if (!sink.Write("beat " + std::to_string(i) + "\n")) break;
        sink.WaitCancelled(100ms);
      }
      forever_cancelled = true;
      return OkStatus();
    }
    return Error::Make(Error::Code::kNotFound, "container " + container + " not found");
  }

  Status AdmitExec(const ExecRequest& r) override {
    if (!r.command.empty() && r.command[0] == "sealed") {
      return Error::Make(Error::Code::kForbidden,
                         "exec is refused: pod runs on a sealed runner (hyperslice)");
    }
    return OkStatus();
  }

  Result<int> Exec(const ExecRequest& r, ExecSession& s) override {
    {
      std::lock_guard lock(mu);
      last_exec = r;
    }
    const std::string& cmd = r.command[0];
    if (cmd == "echo") {
      std::string out;
      for (size_t i = 1; i < r.command.size(); ++i) out += (i > 1 ? " " : "") + r.command[i];
      s.WriteStdout(out + "\n");
      return 0;
    }
    if (cmd == "fail") {
      s.WriteStderr("to stderr\n");
      return std::stoi(r.command.at(1));
    }
    if (cmd == "cat") {
      while (true) {
        ExecInput in = s.ReadInput(1s);
        if (in.kind == ExecInput::Kind::kStdin) s.WriteStdout(in.data);
        if (in.kind == ExecInput::Kind::kStdinEof || in.kind == ExecInput::Kind::kGone) break;
      }
      return 0;
    }
    if (cmd == "refused-late") {
      return Error::Make(Error::Code::kForbidden, "the runner refused the command");
    }
    s.WriteStderr(cmd + ": not found\n");
    return 127;
  }

  std::atomic<int64_t> last_tail{0};
  std::atomic<bool> forever_started{false};
  std::atomic<bool> forever_cancelled{false};
  std::mutex mu;
  ExecRequest last_exec;
};

struct Recorded {
  std::mutex mu;
  std::vector<RequestAttributes> seen;
  std::atomic<bool> deny_exec{false};
};

class KubeletApiTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    client_ = testenv::AdminClient().get() ? testenv::AdminClient() : nullptr;
    ASSERT_TRUE(client_);
    dir_ = fs::temp_directory_path() / ("kapi-" + std::to_string(getpid()));
    fs::create_directories(dir_);
    // The serving pair (the control node gets its own through a CSR; here a test CA).
    auto ca = net::pki::MakeCa("kubelet-serving-test-ca");
    ASSERT_TRUE(ca.ok());
    auto serving = net::pki::Issue(*ca, {.common_name = "system:node:" + NodeName(),
                                         .organizations = {"system:nodes"},
                                         .ip_addresses = {"127.0.0.1"},
                                         .server = true});
    ASSERT_TRUE(serving.ok());
    std::ofstream(dir_ / "kubelet.crt") << serving->cert_pem;
    std::ofstream(dir_ / "kubelet.key") << serving->key_pem;
    // The client CA as a control node reads it.
    auto cm = client_->Get(kube::resources::ConfigMaps(), "kube-system",
                           "extension-apiserver-authentication");
    ASSERT_TRUE(cm.ok()) << cm.error().ToString();
    client_ca_ = bj::value_to<std::string>(cm->at("data").at("client-ca-file"));

    backend_ = std::make_shared<ScriptedBackend>();
    recorded_ = std::make_shared<Recorded>();
    ServerOptions o;
    o.cert_file = (dir_ / "kubelet.crt").string();
    o.key_file = (dir_ / "kubelet.key").string();
    o.client_ca_pem = client_ca_;
    o.node_name = NodeName();
    o.authorize = [rec = recorded_](const RequestAttributes& a) -> Status {
      std::lock_guard lock(rec->mu);
      rec->seen.push_back(a);
      if (rec->deny_exec && a.path.rfind("/exec/", 0) == 0) {
        return Error::Make(Error::Code::kForbidden, "denied by the test's authorizer");
      }
      return OkStatus();
    };
    auto server = Server::Start(o, backend_);
    ASSERT_TRUE(server.ok()) << server.error().ToString();
    server_ = std::move(*server);

    ns_ = "kapi-" + std::to_string(getpid());
    ASSERT_TRUE(client_
                    ->Create(kube::resources::Namespaces(), "",
                             bj::object{{"apiVersion", "v1"},
                                        {"kind", "Namespace"},
                                        {"metadata", {{"name", ns_}}}})
                    .ok());
    bj::object status{
        {"addresses", bj::array{bj::object{{"type", "InternalIP"}, {"address", "127.0.0.1"}},
                                bj::object{{"type", "Hostname"}, {"address", NodeName()}}}},
        {"daemonEndpoints", {{"kubeletEndpoint", {{"Port", server_->port()}}}}},
        {"conditions", bj::array{bj::object{{"type", "Ready"},
                                            {"status", "True"},
                                            {"reason", "KubeletReady"},
                                            {"message", "test control node"}}}}};
    auto node = client_->Create(kube::resources::Nodes(), "",
                                bj::object{{"apiVersion", "v1"},
                                           {"kind", "Node"},
                                           {"metadata", {{"name", NodeName()}}},
                                           {"status", status}});
    ASSERT_TRUE(node.ok()) << node.error().ToString();
    // Create may drop status; set it through the subresource as a kubelet's status update does.
    auto patched =
        client_->Patch(kube::resources::Nodes(), "", NodeName(), kube::PatchType::kMerge,
                       bj::serialize(bj::object{{"status", status}}), {.subresource = "status"});
    ASSERT_TRUE(patched.ok()) << patched.error().ToString();

    bj::array containers;
    for (const char* c : {"c", "ticks", "forever"}) {
      containers.push_back(
          bj::object{{"name", c}, {"image", "example.invalid/app@sha256:" + std::string(64, 'a')}});
    }
    auto pod = client_->Create(
        kube::resources::Pods(), ns_,
        bj::object{{"apiVersion", "v1"},
                   {"kind", "Pod"},
                   {"metadata", {{"name", "p"}, {"namespace", ns_}}},
                   {"spec", {{"nodeName", NodeName()}, {"containers", containers}}}});
    ASSERT_TRUE(pod.ok()) << pod.error().ToString();
    bj::array statuses;
    for (const char* c : {"c", "ticks", "forever"}) {
      statuses.push_back(
          bj::object{{"name", c},
                     {"ready", true},
                     {"restartCount", 0},
                     {"image", "app"},
                     {"imageID", ""},
                     {"state", {{"running", {{"startedAt", "2026-01-01T00:00:00Z"}}}}}});
    }
    auto running = client_->Patch(
        kube::resources::Pods(), ns_, "p", kube::PatchType::kMerge,
        bj::serialize(
            bj::object{{"status", {{"phase", "Running"}, {"containerStatuses", statuses}}}}),
        {.subresource = "status"});
    ASSERT_TRUE(running.ok()) << running.error().ToString();
  }

  static void TearDownTestSuite() {
    if (client_) {
      (void)client_->Delete(kube::resources::Nodes(), "", NodeName());
      (void)client_->Delete(kube::resources::Namespaces(), "", ns_);
    }
    server_.reset();
    std::error_code ec;
    fs::remove_all(dir_, ec);
    client_.reset();
  }

  static std::string NodeName() { return "control-node-" + std::to_string(getpid()); }

  static CommandResult Kubectl(std::vector<std::string> args, std::vector<std::string> env = {}) {
    std::vector<std::string> argv = {testenv::KubectlPath(), "--kubeconfig",
                                     testenv::Cluster().kubeconfig_path(), "-n", ns_};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunCommand(argv, env);
  }

  static inline std::shared_ptr<kube::Client> client_;
  static inline fs::path dir_;
  static inline std::string client_ca_;
  static inline std::shared_ptr<ScriptedBackend> backend_;
  static inline std::shared_ptr<Recorded> recorded_;
  static inline std::unique_ptr<Server> server_;
  static inline std::string ns_;
};

TEST_F(KubeletApiTest, ClientCaFromExtensionApiserverAuthenticationSignsTheKubeletClientCert) {
  // The flag's certificate must verify against the CA a control node reads from the ConfigMap;
  // otherwise every logs/exec call would get 401.
  std::ifstream in(fs::path(testenv::Cluster().work_dir()) / "pki/apiserver-kubelet-client.crt");
  std::string cert((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_FALSE(cert.empty());
  auto signed_by = net::pki::SignedBy(cert, client_ca_);
  ASSERT_TRUE(signed_by.ok());
  EXPECT_TRUE(*signed_by);
}

TEST_F(KubeletApiTest, KubectlLogsShowsTheBackendsChunks) {
  auto r = Kubectl({"logs", "p", "-c", "c"});
  ASSERT_EQ(r.exit_code, 0) << r.errors;
  EXPECT_EQ(r.output, "line 1\nline 2\n");
  r = Kubectl({"logs", "p", "-c", "c", "--tail=1"});
  ASSERT_EQ(r.exit_code, 0) << r.errors;
  EXPECT_EQ(r.output, "line 2\n");
  EXPECT_EQ(backend_->last_tail.load(), 1);
  {
    std::lock_guard lock(recorded_->mu);
    ASSERT_FALSE(recorded_->seen.empty());
    const RequestAttributes& a = recorded_->seen.back();
    EXPECT_EQ(a.user.name, "kube-apiserver-kubelet-client");
    EXPECT_EQ(a.verb, "get");
    EXPECT_EQ(a.resource, "nodes");
    EXPECT_EQ(a.subresource, "proxy");
    EXPECT_EQ(a.name, NodeName());
  }
}

TEST_F(KubeletApiTest, KubectlLogsFollowStreamsUntilTheBackendEnds) {
  auto start = std::chrono::steady_clock::now();
  auto r = Kubectl({"logs", "-f", "p", "-c", "ticks"});
  auto took = std::chrono::steady_clock::now() - start;
  ASSERT_EQ(r.exit_code, 0) << r.errors;
  EXPECT_EQ(r.output, "tick 0\ntick 1\ntick 2\n");
  EXPECT_GE(took, 300ms);  // the backend paced its lines; kubectl waited for them
}

TEST_F(KubeletApiTest, KubectlGoingAwayCancelsAFollowedLog) {
  backend_->forever_cancelled = false;
  auto r = RunCommand({"timeout", "-s", "TERM", "3", testenv::KubectlPath(), "--kubeconfig",
                       testenv::Cluster().kubeconfig_path(), "-n", ns_, "logs", "-f", "p", "-c",
                       "forever"});
  EXPECT_NE(r.output.find("beat 0\nbeat 1\n"), std::string::npos) << r.output << r.errors;
  EXPECT_TRUE(backend_->forever_started.load());
  EXPECT_TRUE(testenv::Eventually([&] { return backend_->forever_cancelled.load(); }, 20s))
      << "the backend never saw the client go away";
}

TEST_F(KubeletApiTest, KubectlLogsOfAnUnknownContainerReportsTheBackendsError) {
  // The apiserver refuses containers the pod does not have; the backend's NotFound for a pod it
  // does not run is what a control node answers for a pod it has not placed yet.
  auto r = Kubectl({"logs", "p", "-c", "nope"});
  EXPECT_NE(r.exit_code, 0);
}

TEST_F(KubeletApiTest, KubectlExecGetsStdoutAndExitsZero) {
  for (const std::string ws : {"true", "false"}) {
    SCOPED_TRACE("KUBECTL_REMOTE_COMMAND_WEBSOCKETS=" + ws);
    auto r = Kubectl({"exec", "p", "-c", "c", "--", "echo", "hello", "world"},
                     {"KUBECTL_REMOTE_COMMAND_WEBSOCKETS=" + ws});
    ASSERT_EQ(r.exit_code, 0) << r.errors;
    EXPECT_EQ(r.output, "hello world\n");
  }
  std::lock_guard lock(backend_->mu);
  EXPECT_EQ(backend_->last_exec.namespace_name, ns_);
  EXPECT_EQ(backend_->last_exec.pod, "p");
  EXPECT_EQ(backend_->last_exec.container, "c");
  EXPECT_TRUE(backend_->last_exec.with_stdout);
  EXPECT_FALSE(backend_->last_exec.with_stdin);
}

TEST_F(KubeletApiTest, KubectlExecNonZeroExitCodeBecomesKubectlsExitCode) {
  for (const std::string ws : {"true", "false"}) {
    SCOPED_TRACE("KUBECTL_REMOTE_COMMAND_WEBSOCKETS=" + ws);
    auto r = Kubectl({"exec", "p", "-c", "c", "--", "fail", "3"},
                     {"KUBECTL_REMOTE_COMMAND_WEBSOCKETS=" + ws});
    EXPECT_EQ(r.exit_code, 3) << r.output << r.errors;
    EXPECT_NE(r.errors.find("to stderr\n"), std::string::npos) << r.errors;
    EXPECT_NE(r.errors.find("command terminated with exit code 3"), std::string::npos) << r.errors;
  }
}

TEST_F(KubeletApiTest, KubectlExecInteractivePipesStdinThrough) {
  for (const std::string ws : {"true", "false"}) {
    SCOPED_TRACE("KUBECTL_REMOTE_COMMAND_WEBSOCKETS=" + ws);
    std::string cmd = "printf 'abc\\ndef\\n' | KUBECTL_REMOTE_COMMAND_WEBSOCKETS=" + ws + " '" +
                      testenv::KubectlPath() + "' --kubeconfig '" +
                      testenv::Cluster().kubeconfig_path() + "' -n " + ns_ +
                      " exec -i p -c c -- cat";
    auto r = RunCommand({"/bin/sh", "-c", cmd});
    ASSERT_EQ(r.exit_code, 0) << r.errors;
    EXPECT_EQ(r.output, "abc\ndef\n");
  }
}

TEST_F(KubeletApiTest, ExecRefusedBeforeTheUpgradeShowsTheBackendsMessage) {
  auto r = Kubectl({"exec", "p", "-c", "c", "--", "sealed"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.errors.find("exec is refused: pod runs on a sealed runner"), std::string::npos)
      << r.errors;
  r = Kubectl({"exec", "p", "-c", "c", "--", "refused-late"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.errors.find("the runner refused the command"), std::string::npos) << r.errors;
}

TEST_F(KubeletApiTest, AuthorizerDenialIsForbidden) {
  recorded_->deny_exec = true;
  auto r = Kubectl({"exec", "p", "-c", "c", "--", "echo", "x"});
  recorded_->deny_exec = false;
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.errors.find("Forbidden"), std::string::npos) << r.errors;
  EXPECT_NE(r.errors.find("subresource=proxy"), std::string::npos) << r.errors;
  std::lock_guard lock(recorded_->mu);
  bool saw_exec = false;
  for (const auto& a : recorded_->seen) {
    if (a.path.rfind("/exec/", 0) == 0) {
      saw_exec = true;
      EXPECT_TRUE(a.verb == "create" || a.verb == "get") << a.verb;
      EXPECT_EQ(a.subresource, "proxy");
    }
  }
  EXPECT_TRUE(saw_exec);
}

net::Response Get(const net::TlsConfig& tls, const std::string& path, uint16_t port) {
  auto c = net::HttpClient::Create(
      {.base_url = "https://127.0.0.1:" + std::to_string(port), .tls = tls});
  EXPECT_TRUE(c.ok());
  auto r = (*c)->Do({.method = "GET", .target = path});
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().ToString());
  return r.ok() ? *r : net::Response{};
}

TEST_F(KubeletApiTest, ClientWithoutACertificateFromTheClientCaGets401) {
  net::TlsConfig none{.insecure_skip_verify = true};
  EXPECT_EQ(Get(none, "/healthz", server_->port()).status, 401);
  auto other_ca = net::pki::MakeCa("some-other-ca");
  ASSERT_TRUE(other_ca.ok());
  auto other = net::pki::Issue(*other_ca, {.common_name = "kube-apiserver-kubelet-client",
                                           .organizations = {"system:masters"},
                                           .client = true});
  ASSERT_TRUE(other.ok());
  net::TlsConfig stranger{.client_cert_pem = other->cert_pem,
                          .client_key_pem = other->key_pem,
                          .insecure_skip_verify = true};
  EXPECT_EQ(Get(stranger, "/containerLogs/x/p/c", server_->port()).status, 401);
  // The admin's certificate is signed by the client CA: allowed.
  auto cfg = testenv::Cluster().AdminConfig();
  net::TlsConfig admin{.client_cert_pem = cfg.tls.client_cert_pem,
                       .client_key_pem = cfg.tls.client_key_pem,
                       .insecure_skip_verify = true};
  auto ok = Get(admin, "/healthz", server_->port());
  EXPECT_EQ(ok.status, 200);
  EXPECT_EQ(ok.body, "ok");
  EXPECT_EQ(Get(admin, "/attach/x/p/c", server_->port()).status, 501);
  EXPECT_EQ(Get(admin, "/portForward/x/p", server_->port()).status, 501);
  EXPECT_EQ(Get(admin, "/runningpods/", server_->port()).status, 404);
  auto logs = Get(admin, "/containerLogs/" + ns_ + "/p/c", server_->port());
  EXPECT_EQ(logs.status, 200);
  EXPECT_EQ(logs.body, "line 1\nline 2\n");
  EXPECT_EQ(Get(admin, "/containerLogs/" + ns_ + "/other/c", server_->port()).status, 404);
}

double ProxiedToKubeletExecs(kube::Client& client) {
  auto m = client.Raw("GET", "/metrics");
  if (!m.ok()) return -1;
  std::string needle =
      "apiserver_websocket_streaming_requests_total{proxy_type=\"proxied_to_kubelet\",subresource="
      "\"exec\"} ";
  size_t at = m->body.find(needle);
  if (at == std::string::npos) return 0;
  return std::strtod(m->body.c_str() + at + needle.size(), nullptr);
}

TEST_F(KubeletApiTest, WebSocketProxiedToTheNodeWhenItDeclaresExtendWebSocketsToKubelet) {
  auto patched = client_->Patch(kube::resources::Nodes(), "", NodeName(), kube::PatchType::kMerge,
                                R"({"status":{"declaredFeatures":["ExtendWebSocketsToKubelet"]}})",
                                {.subresource = "status"});
  ASSERT_TRUE(patched.ok()) << patched.error().ToString();
  const bj::value* declared = patched->at("status").as_object().if_contains("declaredFeatures");
  if (declared == nullptr) {
    GTEST_SKIP() << "this apiserver drops status.declaredFeatures (NodeDeclaredFeatures off)";
  }
  double before = ProxiedToKubeletExecs(*client_);
  auto r = Kubectl({"exec", "p", "-c", "c", "--", "echo", "over", "websocket"},
                   {"KUBECTL_REMOTE_COMMAND_WEBSOCKETS=true"});
  auto f = Kubectl({"exec", "p", "-c", "c", "--", "fail", "7"},
                   {"KUBECTL_REMOTE_COMMAND_WEBSOCKETS=true"});
  std::string cmd = "printf 'ws in\\n' | '" + testenv::KubectlPath() + "' --kubeconfig '" +
                    testenv::Cluster().kubeconfig_path() + "' -n " + ns_ + " exec -i p -c c -- cat";
  auto i = RunCommand({"/bin/sh", "-c", cmd});
  double after = ProxiedToKubeletExecs(*client_);
  (void)client_->Patch(kube::resources::Nodes(), "", NodeName(), kube::PatchType::kMerge,
                       R"({"status":{"declaredFeatures":null}})", {.subresource = "status"});
  EXPECT_EQ(r.exit_code, 0) << r.errors;
  EXPECT_EQ(r.output, "over websocket\n");
  EXPECT_EQ(f.exit_code, 7) << f.errors;
  EXPECT_NE(f.errors.find("command terminated with exit code 7"), std::string::npos) << f.errors;
  EXPECT_EQ(i.exit_code, 0) << i.errors;
  EXPECT_EQ(i.output, "ws in\n");
  EXPECT_GE(after - before, 3) << "the apiserver did not proxy the WebSocket to this server";
}

}  // namespace
}  // namespace hyperslice::runners::kubeletapi
