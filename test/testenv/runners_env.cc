#include "test/testenv/runners_env.h"

#include <sys/mount.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <grpcpp/grpcpp.h>
#include <boost/json.hpp>

#include "src/base/base64.h"
#include "src/base/command.h"
#include "src/base/json.h"
#include "src/kube/metrics.h"
#include "src/kube/quantity.h"
#include "src/runners/controlnode/api.h"
#include "test/testenv/crds.h"
#include "test/testenv/eventually.h"
#include "test/testenv/testenv.h"

namespace hyperslice::testenv {

namespace json = boost::json;
namespace cn = runners::controlnode;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

Error Fail(std::string message) { return Error::Make(Error::Code::kInternal, std::move(message)); }

}  // namespace

std::string StringAt(const json::object& o, std::string_view dotted, std::string_view key) {
  const json::object* at = dotted.empty() ? &o : jsonfield::ObjectAt(o, dotted);
  return at != nullptr ? std::string(jsonfield::StringField(*at, key)) : std::string();
}

Result<std::unique_ptr<RunnersEnv>> RunnersEnv::Start(const RunnersEnvOptions& options) {
  std::unique_ptr<RunnersEnv> env(new RunnersEnv());
  HS_RETURN_IF_ERROR(env->Init(options));
  return env;
}

Status RunnersEnv::Init(const RunnersEnvOptions& options) {
  localcluster::Options o;
  o.scheduler = true;
  // The node lifecycle controller lifts the not-ready taint the apiserver puts on new Nodes,
  // and the CSR signer signs the control node's kubelet-serving certificate.
  o.controller_manager = true;
  o.audit_log = options.audit_log;
  ConfigureCluster(o);
  client_ = AdminClient();
  if (!client_) return Fail("no admin client for the shared cluster");
  std::vector<std::string> files = {HS_DEPLOY_DIR "/crds/runners.hyperslice.dev_controlnodes.yaml",
                                    HS_DEPLOY_DIR "/crds/runners.hyperslice.dev_runners.yaml"};
  std::vector<kube::Resource> served = {cn::ControlNodes(), cn::Runners()};
  for (const auto& [file, resource] : options.extra_crds) {
    files.push_back(HS_DEPLOY_DIR "/crds/" + file);
    served.push_back(resource);
  }
  HS_RETURN_IF_ERROR(InstallCrds(files, served));
  ns_ = TestNamespace();
  // kube-controller-manager makes the namespace's default ServiceAccount a moment after the
  // namespace; until then the apiserver refuses every pod in it (the first test's pod was, on a
  // loaded machine).
  const bool account = Eventually(
      [&] {
        auto sa = client_->Raw("GET", "/api/v1/namespaces/" + ns_ + "/serviceaccounts/default");
        return sa.ok() && sa->status == 200;
      },
      std::chrono::seconds(60));
  if (!account) return Fail("no default ServiceAccount in namespace " + ns_);
  std::string tmpl = "/tmp/hs-" + options.name + "-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) return Fail("mkdtemp " + tmpl);
  dir_ = tmpl;

  HS_ASSIGN_OR_RETURN(registry_, LocalRegistry::Start());
  HS_ASSIGN_OR_RETURN(image_, registry_->PushTestImage(options.image));

  HS_ASSIGN_OR_RETURN(ca_, cn::EnsureRunnersCa(*client_, ns_, "hyperslice-runners-ca"));
  ca_file_ = dir_ + "/runners-ca.crt";
  std::ofstream(ca_file_) << ca_.ca.cert_pem;
  kube::ManagerOptions mo;
  mo.client = client_;
  HS_ASSIGN_OR_RETURN(mgr_, kube::Manager::Create(mo));

  cn::OperatorOptions oo;
  oo.client = client_;
  oo.ns = ns_;
  // The control node's client certificate from the runners CA, its credentials to agents.
  grpc::SslCredentialsOptions so;
  so.pem_root_certs = ca_.ca.cert_pem;
  so.pem_cert_chain = ca_.control_node.cert_pem;
  so.pem_private_key = ca_.control_node.key_pem;
  auto creds = grpc::SslCredentials(so);
  oo.agent_credentials =
      [creds](const std::string&) -> Result<std::shared_ptr<grpc::ChannelCredentials>> {
    return creds;
  };
  oo.probe_interval = 500ms;
  oo.unhealthy_after = 4s;
  oo.lease_renew_interval = 2s;
  cn::ServersOptions sv;
  sv.client = client_;
  sv.link_address = "127.0.0.1:0";
  HS_ASSIGN_OR_RETURN(kubelet_port_, FreeLoopbackPort("127.0.0.1"));
  sv.kubelet_address = "127.0.0.1:" + std::to_string(kubelet_port_);
  sv.state_dir = dir_ + "/operator";
  if (options.configure) HS_RETURN_IF_ERROR(options.configure(*this, oo, sv));
  HS_ASSIGN_OR_RETURN(auto set, cn::RegisterOperator(*mgr_, oo));
  HS_ASSIGN_OR_RETURN(servers_, cn::RunnerServers::Start(sv, ca_, set));
  run_ = std::thread([this] { (void)mgr_->Run(); });
  return OkStatus();
}

RunnersEnv::~RunnersEnv() {
  stop_tokens_ = true;
  if (token_watch_.joinable()) token_watch_.join();
  if (servers_) servers_->Stop();
  if (mgr_) mgr_->Stop();
  if (run_.joinable()) run_.join();
  mgr_.reset();
  registry_.reset();
  if (!dir_.empty()) {
    // A failed test may leave a container's rootfs mounted below the folder.
    std::ifstream mounts("/proc/mounts");
    std::string dev, at, rest;
    while (mounts >> dev >> at && std::getline(mounts, rest)) {
      if (at.rfind(dir_ + "/", 0) == 0) ::umount2(at.c_str(), MNT_DETACH);
    }
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
}

Status RunnersEnv::CreateControlNode(const std::string& name) const {
  return Create(cn::ControlNodes(), "",
                R"({"apiVersion":"runners.hyperslice.dev/v1alpha1","kind":"ControlNode",)"
                R"("metadata":{"name":")" +
                    name + R"("},"spec":{"address":"127.0.0.1","kubeletPort":)" +
                    std::to_string(kubelet_port_) + "}}");
}

Status RunnersEnv::Create(const kube::Resource& r, const std::string& ns,
                          const std::string& body) const {
  boost::system::error_code ec;
  auto v = json::parse(body, ec);
  if (ec || !v.is_object()) return Fail("not a JSON object: " + body);
  auto created = client_->Create(r, ns, v.as_object());
  if (!created.ok()) return Fail(created.error().message + "\n" + body);
  return OkStatus();
}

std::optional<json::object> RunnersEnv::Get(const kube::Resource& r, const std::string& ns,
                                            const std::string& name) const {
  auto got = client_->Get(r, ns, name);
  if (!got.ok()) return std::nullopt;
  return *got;
}

Status RunnersEnv::CreateRunner(const std::string& name, const std::string& control_node,
                                const std::string& placement, const std::string& spec_json) const {
  return Create(cn::Runners(), "",
                R"({"apiVersion":"runners.hyperslice.dev/v1alpha1","kind":"Runner",)"
                R"("metadata":{"name":")" +
                    name + R"("},"spec":{"controlNode":")" + control_node + R"(",")" + placement +
                    R"(":)" + spec_json + "}}");
}

std::string RunnersEnv::RunnerCondition(const std::string& runner, const std::string& type,
                                        std::string* message) const {
  auto r = Get(cn::Runners(), "", runner);
  const json::object* st = r ? jsonfield::ObjectField(*r, "status") : nullptr;
  const json::array* conds = st ? jsonfield::ArrayField(*st, "conditions") : nullptr;
  if (conds == nullptr) return "";
  for (const auto& c : *conds) {
    if (!c.is_object() || jsonfield::StringField(c.as_object(), "type") != type) continue;
    if (message) *message = std::string(jsonfield::StringField(c.as_object(), "message"));
    return std::string(jsonfield::StringField(c.as_object(), "status")) + "/" +
           std::string(jsonfield::StringField(c.as_object(), "reason"));
  }
  return "";
}

bool RunnersEnv::WarningEvent(const std::string& involved, const std::string& reason,
                              const std::string& text) const {
  kube::ListOptions lo;
  lo.field_selector = "involvedObject.name=" + involved;
  auto l = client_->List(kube::resources::Events(), "default", lo);
  if (!l.ok()) return false;
  for (const auto& e : l->items) {
    if (StringAt(e, "", "type") == "Warning" && StringAt(e, "", "reason") == reason &&
        StringAt(e, "", "message").find(text) != std::string::npos) {
      return true;
    }
  }
  return false;
}

void RunnersEnv::WatchJoinTokens() {
  token_watch_ = std::thread([this] {
    while (!stop_tokens_.load()) {
      kube::ListOptions lo;
      lo.label_selector = "runners.hyperslice.dev/runner";
      auto l = client_->List(kube::resources::Secrets(), ns_, lo);
      if (l.ok()) {
        std::lock_guard lock(tokens_mu_);
        for (const auto& s : l->items) {
          auto d = Base64Decode(StringAt(s, "data", "token"));
          if (d.ok() && !d->empty()) tokens_.insert(*d);
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
}

std::set<std::string> RunnersEnv::MintedJoinTokens() const {
  std::lock_guard lock(tokens_mu_);
  return tokens_;
}

std::string RunnersEnv::RunnerPhase(const std::string& runner) const {
  auto r = Get(cn::Runners(), "", runner);
  return r ? StringAt(*r, "status", "phase") : "";
}

int64_t RunnersEnv::NodeMilli(const std::string& node, const std::string& which,
                              const std::string& resource) const {
  auto n = Get(kube::resources::Nodes(), "", node);
  if (!n) return -1;
  auto q = kube::Quantity::Parse(StringAt(*n, "status." + which, resource));
  return q.ok() ? q->MilliValue() : -1;
}

Result<std::string> RunnersEnv::JoinToken(const std::string& runner,
                                          std::chrono::seconds timeout) const {
  std::string token;
  bool found = Eventually(
      [&] {
        auto s = client_->Get(kube::resources::Secrets(), ns_, "runner-join-" + runner);
        if (!s.ok()) return false;
        auto d = Base64Decode(StringAt(*s, "data", "token"));
        token = d.ok() ? *d : "";
        return !token.empty();
      },
      timeout);
  if (!found) return Fail("no join token Secret for " + runner);
  return token;
}

bool RunnersEnv::WaitNoPods(std::chrono::seconds timeout) const {
  return Eventually(
      [&] {
        auto l = client_->List(kube::resources::Pods(), ns_);
        return l.ok() && l->items.empty();
      },
      timeout);
}

double RunnersEnv::RunnerReconciles() {
  return kube::metrics::Registry::Default()
      .GetCounter("controller_runtime_reconcile_total", "",
                  {{"controller", "runners-runner"}, {"result", "requeue_after"}})
      .Value();
}

}  // namespace hyperslice::testenv
