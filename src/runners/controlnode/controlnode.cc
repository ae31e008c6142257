#include "src/runners/controlnode/controlnode.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <sstream>

#include <boost/json.hpp>

#include "src/base/json.h"
#include "src/base/log.h"
#include "src/gpu/provider.h"
#include "src/kube/client.h"
#include "src/kube/controller.h"
#include "src/kube/events.h"
#include "src/kube/informer.h"
#include "src/kube/manager.h"
#include "src/kube/metrics.h"
#include "src/kube/node_conditions.h"
#include "src/kube/object_helpers.h"
#include "src/kube/store.h"
#include "src/runners/controlnode/api.h"
#include "src/runners/controlnode/attestation.h"
#include "src/runners/controlnode/class_protection.h"
#include "src/runners/controlnode/pod_request.h"
#include "src/runners/policy/policy.h"
#include "src/runners/sealed/sealed.h"

namespace hyperslice::runners::controlnode {
namespace {

namespace json = boost::json;
using jsonfield::ArrayField;
using jsonfield::ObjectField;
using jsonfield::StringField;
using jsonfield::StringValue;
using Ms = std::chrono::milliseconds;

constexpr char kNodeLeaseNamespace[] = "kube-node-lease";

std::string Annotation(const kube::Object& obj, const char* key) {
  const json::object* meta = ObjectField(obj, "metadata");
  const json::object* ann = meta != nullptr ? ObjectField(*meta, "annotations") : nullptr;
  return ann != nullptr ? StringValue(*ann, key) : std::string();
}

std::vector<std::string> SplitComma(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string part;
  while (std::getline(ss, part, ',')) {
    if (!part.empty()) out.push_back(part);
  }
  return out;
}

std::string JoinComma(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ",") + s;
  return out;
}

std::string PodPhase(const kube::Object& pod) {
  const json::object* st = ObjectField(pod, "status");
  return st != nullptr ? StringValue(*st, "phase") : std::string();
}
bool Terminal(const std::string& phase) { return phase == "Succeeded" || phase == "Failed"; }

std::string Rfc3339(int64_t unix_seconds) {
  return kube::FormatTime(
      std::chrono::system_clock::time_point(std::chrono::seconds(unix_seconds)));
}

// Pod conditions without their times, for comparing desired and current.
json::array ConditionsSansTimes(const json::array* conds) {
  json::array out;
  if (conds == nullptr) return out;
  for (const auto& c : *conds) {
    if (!c.is_object()) continue;
    json::object o = c.as_object();
    o.erase("lastTransitionTime");
    o.erase("lastProbeTime");
    out.push_back(std::move(o));
  }
  return out;
}

json::object ContainerStatusJson(const v1::ContainerStatus& c, const std::string& uid) {
  json::object state;
  bool running = false;
  if (c.has_running()) {
    running = true;
    state["running"] = json::object{{"startedAt", Rfc3339(c.running().started_at_unix())}};
  } else if (c.has_terminated()) {
    const auto& t = c.terminated();
    json::object term{
        {"exitCode", t.exit_code()},
        {"reason", t.reason().empty() ? (t.exit_code() == 0 ? "Completed" : "Error") : t.reason()},
        {"startedAt", Rfc3339(t.started_at_unix())},
        {"finishedAt", Rfc3339(t.finished_at_unix())},
        {"containerID", "hyperslice://" + uid + "/" + c.name()}};
    if (t.signal() != 0) term["signal"] = t.signal();
    if (!t.message().empty()) term["message"] = t.message();
    state["terminated"] = std::move(term);
  } else {
    json::object w{{"reason", c.has_waiting() && !c.waiting().reason().empty()
                                  ? c.waiting().reason()
                                  : std::string("ContainerCreating")}};
    if (c.has_waiting() && !c.waiting().message().empty()) w["message"] = c.waiting().message();
    state["waiting"] = std::move(w);
  }
  json::object out{{"name", c.name()},         {"image", c.image()},
                   {"imageID", c.image_id()},  {"ready", c.ready()},
                   {"started", running},       {"restartCount", c.restart_count()},
                   {"state", std::move(state)}};
  if (running || c.has_terminated()) out["containerID"] = "hyperslice://" + uid + "/" + c.name();
  return out;
}

// The pod status a kubelet would write for what the agents report (one status per host).
json::object DesiredStatus(const kube::Object& pod, const std::vector<v1::PodStatus>& hosts,
                           const std::string& host_ip) {
  bool any_failed = false, all_succeeded = true, any_running = false, all_running = true;
  for (const auto& h : hosts) {
    any_failed = any_failed || h.phase() == "Failed";
    all_succeeded = all_succeeded && h.phase() == "Succeeded";
    any_running = any_running || h.phase() == "Running";
    all_running = all_running && (h.phase() == "Running" || h.phase() == "Succeeded");
  }
  std::string phase = any_failed                     ? "Failed"
                      : all_succeeded                ? "Succeeded"
                      : (any_running && all_running) ? "Running"
                                                     : "Pending";
  const v1::PodStatus& first = hosts.front();
  json::object st{{"phase", phase}, {"hostIP", host_ip}};
  st["hostIPs"] = json::array{json::object{{"ip", host_ip}}};
  if (!first.pod_ip().empty()) {
    st["podIP"] = first.pod_ip();
    st["podIPs"] = json::array{json::object{{"ip", first.pod_ip()}}};
  }
  int64_t start = 0;
  for (const auto& h : hosts) {
    if (h.start_time_unix() > 0 && (start == 0 || h.start_time_unix() < start)) {
      start = h.start_time_unix();
    }
  }
  if (start > 0) st["startTime"] = Rfc3339(start);
  for (const auto& h : hosts) {
    if (h.phase() == phase && !h.reason().empty()) {
      st["reason"] = h.reason();
      if (!h.message().empty()) st["message"] = h.message();
      break;
    }
  }
  std::string uid(kube::MetaString(pod, "uid"));
  json::array cs, ics;
  bool all_ready = first.container_statuses_size() > 0;
  for (const auto& c : first.container_statuses()) {
    cs.push_back(ContainerStatusJson(c, uid));
  }
  for (const auto& h : hosts) {
    for (const auto& c : h.container_statuses()) all_ready = all_ready && c.ready();
  }
  bool initialized = true;
  for (const auto& c : first.init_container_statuses()) {
    ics.push_back(ContainerStatusJson(c, uid));
    initialized = initialized && c.has_terminated() && c.terminated().exit_code() == 0;
  }
  if (!cs.empty()) st["containerStatuses"] = std::move(cs);
  if (!ics.empty()) st["initContainerStatuses"] = std::move(ics);

  json::array conds;
  if (const json::object* cur = ObjectField(pod, "status")) {
    if (const json::array* cc = ArrayField(*cur, "conditions")) {
      for (const auto& c : *cc) {
        if (c.is_object() && StringField(c.as_object(), "type") == "PodScheduled") {
          json::object o = c.as_object();
          conds.push_back(std::move(o));
        }
      }
    }
  }
  bool terminal = Terminal(phase);
  bool started = any_running || terminal;
  bool ready = !terminal && phase == "Running" && all_ready;
  auto cond = [&](const char* type, bool ok, const char* reason) {
    json::object c{{"type", type}, {"status", ok ? "True" : "False"}};
    if (!ok && reason != nullptr) c["reason"] = reason;
    conds.push_back(std::move(c));
  };
  cond("PodReadyToStartContainers", started || phase == "Pending", nullptr);
  cond("Initialized", initialized || terminal, "ContainersNotInitialized");
  cond("ContainersReady", ready, terminal ? "PodCompleted" : "ContainersNotReady");
  cond("Ready", ready, terminal ? "PodCompleted" : "ContainersNotReady");
  st["conditions"] = std::move(conds);
  return st;
}

// The merge patch turning the pod's status into `want` (transition times kept where a condition
// did not change); nullopt when nothing differs.
std::optional<json::object> StatusPatch(const kube::Object& pod, json::object want) {
  const json::object* cur = ObjectField(pod, "status");
  static const json::object kEmpty;
  if (cur == nullptr) cur = &kEmpty;
  bool differs = false;
  for (const auto& [k, v] : want) {
    if (k == "conditions") {
      if (ConditionsSansTimes(ArrayField(*cur, "conditions")) !=
          ConditionsSansTimes(&v.as_array())) {
        differs = true;
      }
      continue;
    }
    auto* have = cur->if_contains(k);
    if (have == nullptr || *have != v) differs = true;
  }
  if (!differs) return std::nullopt;
  std::string now = kube::FormatTime(std::chrono::system_clock::now());
  std::map<std::string, json::object> old;
  if (const json::array* cc = ArrayField(*cur, "conditions")) {
    for (const auto& c : *cc) {
      if (c.is_object()) old[StringValue(c.as_object(), "type")] = c.as_object();
    }
  }
  for (auto& c : want["conditions"].as_array()) {
    json::object& o = c.as_object();
    if (o.contains("lastTransitionTime")) continue;
    auto it = old.find(StringValue(o, "type"));
    bool same = it != old.end() && StringField(it->second, "status") == StringField(o, "status");
    o["lastTransitionTime"] = same && !StringField(it->second, "lastTransitionTime").empty()
                                  ? json::value(StringField(it->second, "lastTransitionTime"))
                                  : json::value(now);
    o["lastProbeTime"] = nullptr;
  }
  return json::object{{"status", std::move(want)}};
}

// The apiserver as PodInputs.
class ApiInputs final : public PodInputs {
 public:
  explicit ApiInputs(std::shared_ptr<kube::Client> c) : client_(std::move(c)) {}
  Result<kube::Object> Secret(const std::string& ns, const std::string& name) override {
    return client_->Get(kube::resources::Secrets(), ns, name);
  }
  Result<kube::Object> ConfigMap(const std::string& ns, const std::string& name) override {
    return client_->Get(kube::resources::ConfigMaps(), ns, name);
  }
  Result<std::string> ServiceAccountToken(const std::string& ns, const std::string& sa,
                                          const std::string& audience, int64_t expiration,
                                          const std::string& pod_name,
                                          const std::string& pod_uid) override {
    json::object spec{
        {"expirationSeconds", std::max<int64_t>(expiration, 600)},
        {"boundObjectRef",
         json::object{
             {"apiVersion", "v1"}, {"kind", "Pod"}, {"name", pod_name}, {"uid", pod_uid}}}};
    if (!audience.empty()) spec["audiences"] = json::array{json::value(audience)};
    json::object body{
        {"apiVersion", "authentication.k8s.io/v1"}, {"kind", "TokenRequest"}, {"spec", spec}};
    auto resp =
        client_->Raw("POST", "/api/v1/namespaces/" + ns + "/serviceaccounts/" + sa + "/token",
                     json::serialize(body));
    if (!resp.ok()) return resp.error();
    if (resp->status / 100 != 2) return kube::ErrorFromResponse(*resp);
    boost::system::error_code ec;
    json::value v = json::parse(resp->body, ec);
    if (ec || !v.is_object()) {
      return Error::Make(Error::Code::kUnavailable, "TokenRequest: unreadable answer");
    }
    const json::object* st = ObjectField(v.as_object(), "status");
    std::string token = st != nullptr ? StringValue(*st, "token") : "";
    if (token.empty()) return Error::Make(Error::Code::kUnavailable, "TokenRequest: no token");
    return token;
  }

 private:
  std::shared_ptr<kube::Client> client_;
};

struct NodeRuntime {
  ControlNodeSpec spec;
  std::shared_ptr<kube::SharedInformer> pods;  // pods with spec.nodeName = spec.node_name
  std::optional<kube::Object> lease;
  std::chrono::steady_clock::time_point lease_renewed{};
};

struct RunnerEntry {
  std::string control_node;
  std::string address;
  std::shared_ptr<AgentLink> link;
  // Sealed runners only: the verifier of this runner (issue 21).
  std::string policy;
  std::shared_ptr<RunnerAttestation> attestation;
};

struct Assignment {
  std::vector<std::string> runners;
  ResourceList share;
};

class System final : public ControlNodeSet,
                     public kube::Runnable,
                     public std::enable_shared_from_this<System> {
 public:
  System(kube::Manager& mgr, OperatorOptions o)
      : o_(std::move(o)),
        client_(o_.client),
        inputs_(client_),
        tokens_(std::make_shared<SecretJoinTokens>(client_, o_.ns, o_.join_token_ttl)),
        gce_(o_.gce, GceRunnerProvisioner::ApiStore(client_, tokens_)),
        market_(o_.market, MarketRunnerProvisioner::ApiStore(client_, tokens_)),
        registry_(mgr.registry()) {
    kube::EventRecorderOptions eo;
    eo.component = "hyperslice-controlnode";
    events_ = std::make_shared<kube::EventRecorder>(client_, eo);
    classes_ = std::make_unique<ClassProtection>(client_, events_);
    cn_informer_ = mgr.informers()->For(ControlNodes());
    runner_informer_ = mgr.informers()->For(Runners());
    signatures_ = policy::NewRegistrySignatureSource(o_.registry);
    nonces_ = std::make_shared<attest::NonceRegistry>();
  }

  Status Register(kube::Manager& mgr) {
    auto self = shared_from_this();
    std::weak_ptr<System> weak = self;
    kube::ControllerOptions co;
    co.name = "runners-controlnode";
    co.max_concurrent_reconciles = 1;
    cn_ctrl_ = std::make_shared<kube::Controller>(std::move(co), [weak](const std::string& k) {
      auto s = weak.lock();
      return s ? s->ReconcileControlNode(k)
               : Result<kube::ReconcileResult>(kube::ReconcileResult{});
    });
    cn_ctrl_->Watch(*cn_informer_);
    kube::ControllerOptions ro;
    ro.name = "runners-runner";
    ro.max_concurrent_reconciles = std::max(1, o_.workers);
    runner_ctrl_ = std::make_shared<kube::Controller>(std::move(ro), [weak](const std::string& k) {
      auto s = weak.lock();
      return s ? s->ReconcileRunner(k) : Result<kube::ReconcileResult>(kube::ReconcileResult{});
    });
    runner_ctrl_->Watch(*runner_informer_);
    // A ControlNode change (selector) re-evaluates its runners.
    cn_informer_->AddEventHandler(
        kube::OnEachObject([this](const kube::ObjectPtr&) { EnqueueAllRunners(); }));
    // A Runner change re-evaluates its control node (capacity, labels).
    runner_informer_->AddEventHandler(
        kube::OnEachObject([this](const kube::ObjectPtr& r) { EnqueueControlNodeOf(*r); }));
    kube::ControllerOptions po;
    po.name = "runners-pods";
    po.max_concurrent_reconciles = std::max(1, o_.workers);
    pod_ctrl_ = std::make_shared<kube::Controller>(std::move(po), [weak](const std::string& k) {
      auto s = weak.lock();
      return s ? s->ReconcilePod(k) : Result<kube::ReconcileResult>(kube::ReconcileResult{});
    });
    mgr.Add(self);
    mgr.Add(cn_ctrl_);
    mgr.Add(runner_ctrl_);
    mgr.Add(pod_ctrl_);
    return OkStatus();
  }

  // --- Runnable: owns the links and the per-node pod informers --------------------------------
  std::string Name() const override { return "runners-controlnode-links"; }
  Status Start() override { return OkStatus(); }
  void Stop(std::chrono::milliseconds /*grace*/) override {
    std::map<std::string, RunnerEntry> links;
    std::map<std::string, NodeRuntime> nodes;
    {
      std::lock_guard lock(mu_);
      links.swap(runners_);
      nodes.swap(nodes_);
    }
    for (auto& [_, e] : links) {
      if (e.attestation) e.attestation->Stop();
      if (e.link) e.link->Stop();
    }
    for (auto& [_, n] : nodes) {
      if (n.pods) n.pods->Stop();
    }
  }

  // --- ControlNodeSet ---------------------------------------------------------------------------
  Result<PodTarget> AgentForPod(const std::string& node, const std::string& ns,
                                const std::string& name) override {
    std::shared_ptr<kube::SharedInformer> inf;
    {
      std::lock_guard lock(mu_);
      for (auto& [_, n] : nodes_) {
        if (n.spec.node_name == node) inf = n.pods;
      }
    }
    if (!inf) return Error::Make(Error::Code::kNotFound, "no control node " + node);
    kube::ObjectPtr pod = inf->store().Get(kube::ObjectKey(ns, name));
    if (!pod)
      return Error::Make(Error::Code::kNotFound, "pod " + ns + "/" + name + " not on " + node);
    auto runners = SplitComma(Annotation(*pod, kRunnerAnnotation));
    if (runners.empty())
      return Error::Make(Error::Code::kNotFound, "pod not placed on a runner yet");
    auto link = Link(runners.front());
    if (!link || !link->Snapshot(false).healthy) {
      return Error::Make(Error::Code::kUnavailable, "runner " + runners.front() + " is not linked");
    }
    return PodTarget{runners.front(), std::string(kube::MetaString(*pod, "uid")), link->stub()};
  }
  std::shared_ptr<SecretJoinTokens> join_tokens() override { return tokens_; }
  Sealing SealingOf(const std::string& node) override {
    Sealing out;
    {
      std::lock_guard lock(mu_);
      for (auto& [name, n] : nodes_) {
        if (n.spec.node_name != node || !n.spec.sealed) continue;
        out.sealed = true;
        out.control_node = name;
        out.policy = n.spec.workload_policy;
      }
    }
    if (!out.sealed) return out;
    auto p = PolicyNamed(out.policy);
    out.allow_logs = p.ok() && p->allow_logs;
    return out;
  }

  Result<std::string> IssueAttestationToken(const link::AttestationTokenRequest& r) override {
    auto refuse = [&](const std::string& why) {
      Error e = Error::Make(Error::Code::kForbidden, why);
      e.reason = sealed::kReasonAttestationRefused;
      return e;
    };
    if (!o_.token_issuer) return refuse("this operator issues no attestation tokens");
    auto attestation = Attestation(r.runner);
    if (!attestation) return refuse("runner " + r.runner + " is not a linked sealed runner");
    // The pod must be one this control node placed on that runner, and the container its own.
    kube::ObjectPtr pod = PodByUid(r.runner, r.pod_uid);
    if (!pod) return refuse("pod " + r.pod_uid + " does not run on runner " + r.runner);
    std::string image;
    for (const char* list : {"initContainers", "containers"}) {
      const json::object* spec = ObjectField(*pod, "spec");
      const json::array* cs = spec ? ArrayField(*spec, list) : nullptr;
      if (cs == nullptr) continue;
      for (const auto& c : *cs) {
        if (c.is_object() && StringField(c.as_object(), "name") == r.container) {
          image = StringValue(c.as_object(), "image");
        }
      }
    }
    std::string digest = sealed::ImageDigest(image);
    if (digest.rfind("sha256:", 0) != 0) {
      return refuse("container " + r.container + " has no image pinned by digest");
    }
    // A fresh quote bound to this request: the runner is trusted now, not at the last period.
    std::string binding = "hyperslice-token\n" + r.audience;
    for (const auto& n : r.nonces) binding += "\n" + n;
    if (!r.tee_pubkey_sha256.empty()) binding += "\nkey:" + r.tee_pubkey_sha256;
    auto state = attestation->AppraiseNow(binding);
    if (!state.ok()) {
      if (state.error().code == Error::Code::kForbidden) {
        return refuse("runner " + r.runner + " is not trusted: " + state.error().message);
      }
      return state.error();
    }
    const std::string name = sealed::WorkloadImageName(r.pod_uid, r.container);
    auto m = std::find_if(state->measurements.begin(), state->measurements.end(),
                          [&](const attest::Measurement& x) { return x.name == name; });
    if (m == state->measurements.end() || "sha256:" + attest::Hex(m->digest) != digest) {
      return refuse("the image measured for " + r.container + " is not " + digest);
    }
    auto policy = ReadPolicy(state->policy);
    attest::TokenClaims claims;
    claims.subject = r.runner;
    claims.audience = r.audience;
    claims.issued_at = std::chrono::system_clock::now();
    claims.expires_at =
        claims.issued_at + (policy.ok() ? policy->token_lifetime : std::chrono::seconds(300));
    claims.hwmodel = "TPM2";
    claims.dbgstat = "disabled-since-boot";
    claims.image_digest = digest;
    claims.eat_nonce = r.nonces;
    json::object extra{
        {"submods", json::object{{"container", json::object{{"name", r.container},
                                                            {"image_reference", image},
                                                            {"pod", kube::ObjectKey(*pod)},
                                                            {"pod_uid", r.pod_uid}}},
                                 {"runner", json::object{{"name", r.runner},
                                                         {"ek_subject", state->ek_subject},
                                                         {"attestation_policy", state->policy}}}}}};
    // The workload's key, bound into the fresh quote above: a key broker releases secrets
    // encrypted to it (kbs.h kKeyBindingClaim).
    if (!r.tee_pubkey_sha256.empty()) extra["tee_pubkey_sha256"] = r.tee_pubkey_sha256;
    claims.extra_json = json::serialize(extra);
    auto token = o_.token_issuer->Issue(std::move(claims));
    if (token.ok()) {
      log::Info("attestation token issued", {{"runner", r.runner},
                                             {"pod", kube::ObjectKey(*pod)},
                                             {"container", r.container},
                                             {"audience", r.audience}});
    }
    return token;
  }
  std::vector<std::string> NodeNames() override {
    std::lock_guard lock(mu_);
    std::vector<std::string> out;
    for (auto& [_, n] : nodes_) out.push_back(n.spec.node_name);
    return out;
  }
  Status AgentLinked(const std::string& runner, const std::string& agent_address) override {
    auto live = client_->Get(Runners(), "", runner);
    if (!live.ok()) return live.error();
    auto spec = ParseRunner(*live);
    if (!spec.ok() || spec->placement == RunnerSpec::Placement::kHost) return OkStatus();
    const json::object* st = ObjectField(*live, "status");
    if (st != nullptr && StringField(*st, "address") == agent_address) return OkStatus();
    HS_RETURN_IF_ERROR(
        PatchStatus(Runners(), "", runner, json::object{{"address", agent_address}}));
    if (runner_ctrl_) runner_ctrl_->Enqueue(runner);
    return OkStatus();
  }

 private:
  // --- helpers --------------------------------------------------------------------------------
  // Read live: a policy the admin just tightened applies to the next pod.
  Result<policy::WorkloadPolicy> PolicyNamed(const std::string& name) {
    auto obj = client_->Get(WorkloadPolicies(), "", name);
    if (!obj.ok()) {
      return Error::Make(obj.error().code == Error::Code::kNotFound ? Error::Code::kNotFound
                                                                    : Error::Code::kUnavailable,
                         "WorkloadPolicy " + name + " cannot be read: " + obj.error().message,
                         "WorkloadPolicyUnavailable");
    }
    return policy::ParseWorkloadPolicy(*obj);
  }

  // A sealed control node's check of a pod before it goes to a runner: kForbidden (a refusal) or
  // another error (the policy or a registry cannot be read now: retried, the pod stays Pending).
  Status CheckWorkloadPolicy(const kube::Object& pod, const ControlNodeSpec& spec) {
    HS_ASSIGN_OR_RETURN(policy::WorkloadPolicy p, PolicyNamed(spec.workload_policy));
    return policy::Check(p, policy::WorkloadFromPod(pod), *signatures_);
  }

  std::shared_ptr<AgentLink> Link(const std::string& runner) {
    std::lock_guard lock(mu_);
    auto it = runners_.find(runner);
    return it == runners_.end() ? nullptr : it->second.link;
  }

  std::shared_ptr<RunnerAttestation> Attestation(const std::string& runner) {
    std::lock_guard lock(mu_);
    auto it = runners_.find(runner);
    return it == runners_.end() ? nullptr : it->second.attestation;
  }

  // Sealed runners take pods only while their last appraisal passed; others while healthy.
  bool Usable(const std::string& runner, const AgentSnapshot& snap) {
    if (!snap.healthy) return false;
    auto a = Attestation(runner);
    return !a || a->State().verdict == AttestationState::Verdict::kTrusted;
  }

  Result<AttestationPolicySpec> ReadPolicy(const std::string& name) {
    if (name.empty()) return Error::Make(Error::Code::kNotFound, "no policy named");
    HS_ASSIGN_OR_RETURN(kube::Object obj, client_->Get(AttestationPolicies(), "", name));
    return ParseAttestationPolicy(obj);
  }

  // A pod of a control node's Node placed on `runner`, by uid.
  kube::ObjectPtr PodByUid(const std::string& runner, const std::string& uid) {
    std::vector<std::shared_ptr<kube::SharedInformer>> infs;
    {
      std::lock_guard lock(mu_);
      for (auto& [_, n] : nodes_) {
        if (n.pods) infs.push_back(n.pods);
      }
    }
    for (const auto& inf : infs) {
      for (const auto& p : inf->store().List()) {
        if (kube::MetaString(*p, "uid") != uid) continue;
        auto rs = SplitComma(Annotation(*p, kRunnerAnnotation));
        if (std::find(rs.begin(), rs.end(), runner) != rs.end()) return p;
      }
    }
    return nullptr;
  }

  void EnqueueAllRunners() {
    if (!runner_ctrl_) return;
    for (const auto& k : runner_informer_->store().ListKeys()) runner_ctrl_->Enqueue(k);
  }
  void EnqueueControlNodeOf(const kube::Object& runner) {
    const json::object* spec = ObjectField(runner, "spec");
    if (spec != nullptr && cn_ctrl_) {
      auto cn = StringField(*spec, "controlNode");
      if (!cn.empty()) cn_ctrl_->Enqueue(std::string(cn));
    }
  }
  void EnqueuePodsOfRunnerAnywhere(const std::string& runner) {
    std::string cn;
    {
      std::lock_guard lock(mu_);
      auto it = runners_.find(runner);
      if (it == runners_.end()) return;
      cn = it->second.control_node;
    }
    EnqueuePodsOfRunner(cn, runner);
  }

  void EnqueuePodsOfRunner(const std::string& control_node, const std::string& runner) {
    std::shared_ptr<kube::SharedInformer> inf;
    {
      std::lock_guard lock(mu_);
      auto it = nodes_.find(control_node);
      if (it != nodes_.end()) inf = it->second.pods;
    }
    if (!inf) return;
    for (const auto& p : inf->store().List()) {
      auto rs = SplitComma(Annotation(*p, kRunnerAnnotation));
      if (rs.empty() || std::find(rs.begin(), rs.end(), runner) != rs.end()) {
        pod_ctrl_->EnqueueObject(*p);
      }
    }
  }

  // The runners a control node links: named by spec.controlNode and selected.
  std::vector<RunnerSpec> RunnersOf(const ControlNodeSpec& cn) {
    std::vector<RunnerSpec> out;
    for (const auto& r : runner_informer_->store().List()) {
      auto spec = ParseRunner(*r);
      if (spec.ok() && spec->control_node == cn.name && Selects(cn, spec->labels)) {
        out.push_back(*spec);
      }
    }
    return out;
  }

  Status PatchStatus(const kube::Resource& res, const std::string& ns, const std::string& name,
                     const json::object& status) {
    kube::PatchOptions po;
    po.subresource = "status";
    auto r = client_->Patch(res, ns, name, kube::PatchType::kMerge,
                            json::serialize(json::object{{"status", status}}), po);
    if (!r.ok() && r.error().code != Error::Code::kNotFound) return r.error();
    return OkStatus();
  }

  // --- ControlNode: Node, Lease, status -------------------------------------------------------
  Result<kube::ReconcileResult> ReconcileControlNode(const std::string& name) {
    kube::ObjectPtr obj = cn_informer_->store().Get(name);
    if (!obj) {
      StopNode(name);
      return kube::ReconcileResult{};
    }
    if (kube::IsDeleting(*obj)) return Finalize(*obj);
    if (!kube::HasFinalizer(*obj, kNodeFinalizer)) {
      json::array fins;
      if (const json::object* meta = ObjectField(*obj, "metadata")) {
        if (const json::array* f = ArrayField(*meta, "finalizers")) fins = *f;
      }
      fins.push_back(json::value(kNodeFinalizer));
      json::object patch{{"metadata", json::object{{"finalizers", fins},
                                                   {"resourceVersion",
                                                    std::string(kube::ResourceVersionOf(*obj))}}}};
      auto r =
          client_->Patch(ControlNodes(), "", name, kube::PatchType::kMerge, json::serialize(patch));
      if (!r.ok()) return r.error();
    }
    auto spec = ParseControlNode(*obj);
    if (!spec.ok()) {
      kube::Object copy = kube::DeepCopy(*obj);
      bool changed = kube::SetCondition(copy, {.type = "Ready",
                                               .status = "False",
                                               .reason = "InvalidSpec",
                                               .message = spec.error().message,
                                               .observed_generation = kube::Generation(*obj)});
      if (changed)
        HS_RETURN_IF_ERROR(PatchStatus(ControlNodes(), "", name, *ObjectField(copy, "status")));
      return kube::ReconcileResult{};
    }
    EnsureNodeRuntime(*spec);

    // What its healthy runners add up to.
    ResourceList capacity;
    int linked = 0, healthy = 0;
    std::set<std::string> regions, zones;
    json::array runner_names;
    for (const auto& r : RunnersOf(*spec)) {
      runner_names.push_back(json::value(r.name));
      auto link = Link(r.name);
      if (!link) continue;
      AgentSnapshot snap = link->Snapshot(false);
      if (!snap.answered || !snap.info) continue;
      ++linked;
      std::string region = snap.info->region().empty() ? r.region : snap.info->region();
      std::string zone = snap.info->zone().empty() ? r.zone : snap.info->zone();
      regions.insert(region);
      zones.insert(zone);
      if (!Usable(r.name, snap)) continue;  // a sealed runner adds nothing until attested
      ++healthy;
      ResourceList caps = RunnerCapacity(*snap.info, *spec);
      for (const auto& [k, v] : caps) capacity[k] += v;
    }
    for (const char* k : {"cpu", "memory", "pods"}) capacity.emplace(k, 0);
    ResourceList allocatable = capacity;
    for (const auto& [k, v] : spec->reserved) {
      if (allocatable.count(k)) allocatable[k] = std::max<int64_t>(0, allocatable[k] - v);
    }
    std::map<std::string, std::string> labels = spec->labels;
    labels[kControlNodeLabel] = name;
    labels["type"] = "virtual-kubelet";
    labels["kubernetes.io/role"] = "agent";
    labels["kubernetes.io/hostname"] = spec->node_name;
    labels["kubernetes.io/os"] = "linux";
    labels["kubernetes.io/arch"] = "amd64";
    labels["node.kubernetes.io/instance-type"] = "hyperslice-control-node";
    if (regions.size() == 1 && !regions.begin()->empty()) {
      labels["topology.kubernetes.io/region"] = *regions.begin();
    }
    if (zones.size() == 1 && !zones.begin()->empty()) {
      labels["topology.kubernetes.io/zone"] = *zones.begin();
    }
    HS_ASSIGN_OR_RETURN(kube::Object node, EnsureNode(*obj, *spec, labels));
    HS_RETURN_IF_ERROR(SyncNodeStatus(node, *spec, capacity, allocatable));
    HS_RETURN_IF_ERROR(RenewLease(*spec, node));

    // The ControlNode's own status.
    kube::Object copy = kube::DeepCopy(*obj);
    kube::SetCondition(
        copy, {.type = "Ready",
               .status = "True",
               .reason = healthy > 0 ? "NodeRegistered" : "NoHealthyRunner",
               .message = "Node " + spec->node_name + " registered; " + std::to_string(healthy) +
                          " of " + std::to_string(runner_names.size()) + " runners healthy",
               .observed_generation = spec->generation});
    json::object& st = copy["status"].as_object();
    auto to_json = [&](const ResourceList& l) {
      json::object o;
      for (const auto& [k, v] : l) o[k] = FormatQuantity(k, v);
      return o;
    };
    st["nodeName"] = spec->node_name;
    st["runners"] = runner_names;
    st["linkedRunners"] = linked;
    st["healthyRunners"] = healthy;
    st["capacity"] = to_json(capacity);
    st["allocatable"] = to_json(allocatable);
    st["observedGeneration"] = spec->generation;
    const json::object* old = ObjectField(*obj, "status");
    if (old == nullptr || *old != st) HS_RETURN_IF_ERROR(PatchStatus(ControlNodes(), "", name, st));
    registry_
        .GetGauge("hyperslice_runners_control_node_healthy_runners",
                  "Healthy linked runners per control node", {{"control_node", name}})
        .Set(healthy);
    kube::ReconcileResult rr;
    rr.requeue_after = o_.lease_renew_interval;
    return rr;
  }

  ResourceList RunnerCapacity(const v1::RunnerInfo& info, const ControlNodeSpec& cn) {
    ResourceList out;
    for (const auto& [k, v] : info.capacity()) {
      auto q = kube::Quantity::Parse(v);
      if (q.ok()) out[k] = q->MilliValue();
    }
    if (!out.count("pods")) out["pods"] = int64_t{cn.max_pods_per_runner} * 1000;
    return out;
  }

  void EnsureNodeRuntime(const ControlNodeSpec& spec) {
    std::shared_ptr<kube::SharedInformer> stale;
    std::shared_ptr<kube::SharedInformer> fresh;
    {
      std::lock_guard lock(mu_);
      auto& n = nodes_[spec.name];
      bool new_node = !n.pods || n.spec.node_name != spec.node_name;
      n.spec = spec;
      if (!new_node) return;
      stale = n.pods;
      kube::InformerOptions io;
      io.field_selector = "spec.nodeName=" + spec.node_name;
      n.pods = std::make_shared<kube::SharedInformer>(client_, kube::resources::Pods(), io);
      n.lease.reset();
      fresh = n.pods;
    }
    if (stale) stale->Stop();
    auto ctrl = pod_ctrl_;
    fresh->AddEventHandler(
        kube::OnEachObject([ctrl](const kube::ObjectPtr& p) { ctrl->EnqueueObject(*p); }));
    fresh->Start();
    log::Info("control node started", {{"control_node", spec.name}, {"node", spec.node_name}});
  }

  void StopNode(const std::string& name) {
    std::shared_ptr<kube::SharedInformer> inf;
    {
      std::lock_guard lock(mu_);
      auto it = nodes_.find(name);
      if (it == nodes_.end()) return;
      inf = it->second.pods;
      nodes_.erase(it);
    }
    if (inf) inf->Stop();
  }

  Result<kube::ReconcileResult> Finalize(const kube::Object& obj) {
    std::string name(kube::MetaString(obj, "name"));
    auto spec = ParseControlNode(obj);
    std::string node = spec.ok() ? spec->node_name : name;
    StopNode(name);
    Status del = client_->Delete(kube::resources::Nodes(), "", node);
    if (!del.ok() && del.error().code != Error::Code::kNotFound) return del.error();
    del = client_->Delete(kube::resources::Leases(), kNodeLeaseNamespace, node);
    if (!del.ok() && del.error().code != Error::Code::kNotFound) return del.error();
    std::string patch = kube::RemoveFinalizerPatch(obj, kNodeFinalizer);
    if (!patch.empty()) {
      auto r = client_->Patch(ControlNodes(), "", name, kube::PatchType::kJson, patch);
      if (!r.ok() && r.error().code != Error::Code::kNotFound) return r.error();
    }
    events_->Event(obj, kube::EventType::kNormal, "NodeDeleted", "Node " + node + " deleted");
    return kube::ReconcileResult{};
  }

  Result<kube::Object> EnsureNode(const kube::Object& cn, const ControlNodeSpec& spec,
                                  const std::map<std::string, std::string>& labels) {
    json::array taints{json::object{{"key", kControlNodeLabel}, {"effect", "NoSchedule"}}};
    for (const auto& t : spec.taints) {
      json::object o{{"key", t.key}, {"effect", t.effect}};
      if (!t.value.empty()) o["value"] = t.value;
      taints.push_back(std::move(o));
    }
    json::object lab;
    for (const auto& [k, v] : labels) lab[k] = v;
    auto got = client_->Get(kube::resources::Nodes(), "", spec.node_name);
    if (!got.ok() && got.error().code != Error::Code::kNotFound) return got.error();
    if (!got.ok()) {
      kube::Object node{{"apiVersion", "v1"},
                        {"kind", "Node"},
                        {"metadata", json::object{{"name", spec.node_name}, {"labels", lab}}},
                        {"spec", json::object{{"taints", taints}}}};
      HS_RETURN_IF_ERROR(kube::SetControllerReference(cn, node).ok()
                             ? OkStatus()
                             : Status(Error::Make(Error::Code::kInternal, "owner reference")));
      auto created = client_->Create(kube::resources::Nodes(), "", node);
      if (!created.ok()) return created.error();
      events_->Event(cn, kube::EventType::kNormal, "NodeRegistered",
                     "Node " + spec.node_name + " registered");
      log::Info("control node registered its Node", {{"node", spec.node_name}});
      return *created;
    }
    // Labels and taints we own; taints others added (node lifecycle, cordons) are kept.
    const json::object* meta = ObjectField(*got, "metadata");
    const json::object* have_labels = meta ? ObjectField(*meta, "labels") : nullptr;
    bool labels_ok = true;
    for (const auto& [k, v] : lab) {
      if (have_labels == nullptr || have_labels->if_contains(k) == nullptr ||
          have_labels->at(k) != v) {
        labels_ok = false;
      }
    }
    const json::object* nspec = ObjectField(*got, "spec");
    const json::array* have_taints = nspec ? ArrayField(*nspec, "taints") : nullptr;
    std::set<std::string> ours;
    for (const auto& t : taints) ours.insert(StringValue(t.as_object(), "key"));
    json::array want_taints = taints;
    bool taints_ok = true;
    for (const auto& t : taints) {
      bool found = false;
      if (have_taints != nullptr) {
        for (const auto& h : *have_taints) found = found || h == t;
      }
      taints_ok = taints_ok && found;
    }
    if (have_taints != nullptr) {
      for (const auto& h : *have_taints) {
        if (h.is_object() && !ours.count(StringValue(h.as_object(), "key"))) {
          want_taints.push_back(h);
        }
      }
    }
    // The topology labels are ours only while every linked runner agrees: when a runner in
    // another region or zone links, the label set before must go (a merge patch only adds).
    json::object patch_labels = lab;
    for (const char* k : {"topology.kubernetes.io/region", "topology.kubernetes.io/zone"}) {
      if (!lab.contains(k) && have_labels != nullptr && have_labels->contains(k)) {
        patch_labels[k] = nullptr;
        labels_ok = false;
      }
    }
    if (labels_ok && taints_ok) return *got;
    json::object patch{{"metadata", json::object{{"labels", patch_labels}}},
                       {"spec", json::object{{"taints", want_taints}}}};
    return client_->Patch(kube::resources::Nodes(), "", spec.node_name, kube::PatchType::kMerge,
                          json::serialize(patch));
  }

  Status SyncNodeStatus(const kube::Object& node, const ControlNodeSpec& spec,
                        const ResourceList& capacity, const ResourceList& allocatable) {
    static const std::vector<kube::NodeCondition> kConds = {
        {"MemoryPressure", "False", "KubeletHasSufficientMemory",
         "control node has sufficient memory available"},
        {"DiskPressure", "False", "KubeletHasNoDiskPressure", "control node has no disk pressure"},
        {"PIDPressure", "False", "KubeletHasSufficientPID",
         "control node has sufficient PID available"},
        {"Ready", "True", "KubeletReady", "control node is posting ready status"},
    };
    auto to_json = [](const ResourceList& l) {
      json::object o;
      for (const auto& [k, v] : l) o[k] = FormatQuantity(k, v);
      return o;
    };
    json::object want_cap = to_json(capacity), want_alloc = to_json(allocatable);
    const json::object* status = ObjectField(node, "status");
    kube::NodeConditionsUpdate update = kube::KubeletNodeConditions(
        node, kConds, std::chrono::system_clock::now(), o_.node_status_interval);
    const bool changed = update.changed || status == nullptr ||
                         ObjectField(*status, "capacity") == nullptr ||
                         *ObjectField(*status, "capacity") != want_cap ||
                         ObjectField(*status, "allocatable") == nullptr ||
                         *ObjectField(*status, "allocatable") != want_alloc;
    const json::array& conds = update.conditions;
    if (!changed) return OkStatus();
    json::object patch{
        {"status",
         json::object{
             {"capacity", want_cap},
             {"allocatable", want_alloc},
             {"conditions", conds},
             {"addresses",
              json::array{json::object{{"type", "InternalIP"}, {"address", spec.address}},
                          json::object{{"type", "Hostname"}, {"address", spec.node_name}}}},
             {"daemonEndpoints",
              json::object{{"kubeletEndpoint", json::object{{"Port", spec.kubelet_port}}}}},
             {"nodeInfo", json::object{{"machineID", spec.name},
                                       {"systemUUID", spec.name},
                                       {"bootID", boot_id_},
                                       {"kernelVersion", ""},
                                       {"osImage", "hyperslice control node"},
                                       {"containerRuntimeVersion", "hyperslice-runner://v1"},
                                       {"kubeletVersion", o_.kubelet_version},
                                       {"kubeProxyVersion", ""},
                                       {"operatingSystem", "linux"},
                                       {"architecture", "amd64"}}}}}};
    kube::PatchOptions po;
    po.subresource = "status";
    auto r = client_->Patch(kube::resources::Nodes(), "", spec.node_name,
                            kube::PatchType::kStrategicMerge, json::serialize(patch), po);
    if (!r.ok()) return r.error();
    return OkStatus();
  }

  Status RenewLease(const ControlNodeSpec& spec, const kube::Object& node) {
    const auto& leases = kube::resources::Leases();
    std::optional<kube::Object> lease;
    {
      std::lock_guard lock(mu_);
      auto& n = nodes_[spec.name];
      if (n.lease &&
          std::chrono::steady_clock::now() - n.lease_renewed < o_.lease_renew_interval * 8 / 10) {
        return OkStatus();
      }
      lease = n.lease;
    }
    std::string now = kube::FormatMicroTime(std::chrono::system_clock::now());
    for (int attempt = 0; attempt < 3; ++attempt) {
      if (!lease) {
        auto got = client_->Get(leases, kNodeLeaseNamespace, spec.node_name);
        if (got.ok()) {
          lease = *got;
        } else if (got.error().code == Error::Code::kNotFound) {
          kube::Object l{
              {"apiVersion", "coordination.k8s.io/v1"},
              {"kind", "Lease"},
              {"metadata",
               json::object{
                   {"name", spec.node_name},
                   {"namespace", kNodeLeaseNamespace},
                   {"ownerReferences", json::array{json::object{
                                           {"apiVersion", "v1"},
                                           {"kind", "Node"},
                                           {"name", spec.node_name},
                                           {"uid", std::string(kube::MetaString(node, "uid"))}}}}}},
              {"spec", json::object{{"holderIdentity", spec.node_name},
                                    {"leaseDurationSeconds", o_.lease_duration_seconds},
                                    {"renewTime", now}}}};
          auto created = client_->Create(leases, kNodeLeaseNamespace, l);
          if (created.ok()) {
            Renewed(spec.name, *created);
            return OkStatus();
          }
          if (created.error().code != Error::Code::kAlreadyExists) return created.error();
          continue;
        } else {
          return got.error();
        }
      }
      kube::Object updated = *lease;
      json::object& ls = updated["spec"].as_object();
      ls["renewTime"] = now;
      ls["holderIdentity"] = spec.node_name;
      ls["leaseDurationSeconds"] = o_.lease_duration_seconds;
      auto put = client_->Update(leases, kNodeLeaseNamespace, updated);
      if (put.ok()) {
        Renewed(spec.name, *put);
        return OkStatus();
      }
      lease.reset();
      if (put.error().code != Error::Code::kConflict &&
          put.error().code != Error::Code::kNotFound) {
        return put.error();
      }
    }
    return Error::Make(Error::Code::kConflict, "node lease renewal kept conflicting");
  }

  void Renewed(const std::string& cn, kube::Object lease) {
    std::lock_guard lock(mu_);
    auto it = nodes_.find(cn);
    if (it == nodes_.end()) return;
    it->second.lease = std::move(lease);
    it->second.lease_renewed = std::chrono::steady_clock::now();
  }

  // --- Runner: validation, join token, link, status -------------------------------------------
  void StopLink(const std::string& runner) {
    std::shared_ptr<AgentLink> link;
    std::shared_ptr<RunnerAttestation> attestation;
    {
      std::lock_guard lock(mu_);
      auto it = runners_.find(runner);
      if (it == runners_.end()) return;
      link = it->second.link;
      attestation = it->second.attestation;
      runners_.erase(it);
    }
    if (attestation) attestation->Stop();
    if (link) link->Stop();
  }

  // `sealed`: with a RunnerAttestation against AttestationPolicy `policy`.
  Result<std::shared_ptr<AgentLink>> EnsureLink(const RunnerSpec& r, const std::string& address,
                                                bool sealed, const std::string& policy) {
    std::shared_ptr<AgentLink> old;
    std::shared_ptr<RunnerAttestation> old_attestation;
    {
      std::lock_guard lock(mu_);
      auto it = runners_.find(r.name);
      if (it != runners_.end() && it->second.address == address &&
          it->second.control_node == r.control_node &&
          (it->second.attestation != nullptr) == sealed && it->second.policy == policy) {
        return it->second.link;
      }
      if (it != runners_.end()) {
        old = it->second.link;
        old_attestation = it->second.attestation;
        runners_.erase(it);
      }
    }
    if (old_attestation) old_attestation->Stop();
    if (old) old->Stop();
    AgentLinkOptions lo;
    lo.runner = r.name;
    lo.address = address;
    lo.credentials = o_.agent_credentials;
    lo.verify_runner_name = o_.verify_runner_name;
    lo.probe_interval = o_.probe_interval;
    lo.unhealthy_after = o_.unhealthy_after;
    auto ctrl = runner_ctrl_;
    auto pods = pod_ctrl_;
    std::string name = r.name;
    lo.on_change = [ctrl, name] { ctrl->Enqueue(name); };
    // A sealed runner is appraised again whenever one of its pods changes (a workload started:
    // the agent measured it before); the verifier coalesces the triggers.
    auto attestation_slot = std::make_shared<std::weak_ptr<RunnerAttestation>>();
    lo.on_pod = [pods, attestation_slot](const v1::PodStatus& p) {
      pods->Enqueue(kube::ObjectKey(p.pod().namespace_(), p.pod().name()));
      if (auto a = attestation_slot->lock()) a->Trigger();
    };
    auto link = std::make_shared<AgentLink>(std::move(lo));
    HS_RETURN_IF_ERROR(link->Start());
    std::shared_ptr<RunnerAttestation> attestation;
    if (sealed) {
      AttestationOptions ao;
      ao.runner = r.name;
      ao.policy_name = policy;
      ao.stub = link->stub();
      std::weak_ptr<System> weak = shared_from_this();
      ao.policy = [weak](const std::string& name) -> Result<AttestationPolicySpec> {
        auto self = weak.lock();
        if (!self) return Error::Make(Error::Code::kUnavailable, "stopping");
        return self->ReadPolicy(name);
      };
      ao.nonces = nonces_;
      ao.rpc_timeout = std::min<Ms>(o_.rpc_timeout, Ms(30000));
      ao.on_change = [ctrl, name, weak] {
        ctrl->Enqueue(name);
        if (auto self = weak.lock()) self->EnqueuePodsOfRunnerAnywhere(name);
      };
      attestation = std::make_shared<RunnerAttestation>(std::move(ao));
      *attestation_slot = attestation;
      attestation->Start();
    }
    std::lock_guard lock(mu_);
    runners_[r.name] = RunnerEntry{r.control_node, address, link, policy, attestation};
    return link;
  }

  Result<kube::ReconcileResult> ReconcileRunner(const std::string& name) {
    kube::ObjectPtr obj = runner_informer_->store().Get(name);
    if (!obj) {
      StopLink(name);
      return kube::ReconcileResult{};
    }
    kube::Object copy = kube::DeepCopy(*obj);
    if (!copy.contains("status") || !copy["status"].is_object()) copy["status"] = json::object{};
    json::object& st = copy["status"].as_object();
    const json::object* old_status = ObjectField(*obj, "status");
    int64_t gen = kube::Generation(*obj);
    auto set = [&](const char* type, bool ok, const std::string& reason, const std::string& msg) {
      kube::SetCondition(copy, {.type = type,
                                .status = ok ? "True" : "False",
                                .reason = reason,
                                .message = msg,
                                .observed_generation = gen});
    };
    std::optional<Ms> requeue;  // sooner than the health refresh (GCE operations, backoffs)
    auto write = [&]() -> Result<kube::ReconcileResult> {
      json::object& s = copy["status"].as_object();
      s["observedGeneration"] = gen;
      if (old_status == nullptr || *old_status != s) {
        HS_RETURN_IF_ERROR(PatchStatus(Runners(), "", name, s));
      }
      kube::ReconcileResult rr;
      rr.requeue_after = std::max<Ms>(o_.unhealthy_after / 2, Ms(1000));
      if (requeue) rr.requeue_after = std::min<Clock::Duration>(rr.requeue_after, *requeue);
      return rr;
    };
    if (kube::IsDeleting(*obj)) {
      StopLink(name);
      return FinalizeRunner(*obj, st);
    }
    auto spec = ParseRunner(*obj);
    if (!spec.ok()) {
      StopLink(name);
      st["phase"] = "Pending";
      set("Ready", false, "InvalidSpec", spec.error().message);
      set("Linked", false, "InvalidSpec", spec.error().message);
      return write();
    }
    kube::ObjectPtr cn_obj = cn_informer_->store().Get(spec->control_node);
    std::optional<ControlNodeSpec> cn;
    if (cn_obj) {
      auto parsed = ParseControlNode(*cn_obj);
      if (parsed.ok()) cn = *parsed;
    }
    if (!cn || !Selects(*cn, spec->labels)) {
      StopLink(name);
      std::string why = !cn ? "ControlNodeNotFound" : "NotSelected";
      std::string msg = !cn ? "ControlNode " + spec->control_node + " does not exist"
                            : "ControlNode " + spec->control_node +
                                  "'s runnerSelector does not select this runner";
      st["phase"] = "Pending";
      set("Linked", false, why, msg);
      set("Ready", false, why, msg);
      return write();
    }
    std::string address = spec->placement == RunnerSpec::Placement::kHost
                              ? spec->host_address
                              : std::string(StringField(old_status, "address"));
    bool ever_linked = old_status != nullptr && ObjectField(*old_status, "identity") != nullptr;
    ever_linked = ever_linked || (old_status && !StringField(*old_status, "lastSeen").empty());
    // A join token for a runner that never linked (what the admin hands to the host).
    if (!ever_linked && Annotation(*obj, kJoinTokenConsumedAnnotation).empty()) {
      auto created = tokens_->Ensure(*obj);
      if (!created.ok()) return created.error();
      if (*created) {
        events_->Event(*obj, kube::EventType::kNormal, "JoinTokenCreated",
                       "join token Secret " + o_.ns + "/" + JoinTokenSecretName(name) +
                           " created for the runner's host");
      }
      st["joinTokenSecret"] = o_.ns + "/" + JoinTokenSecretName(name);
    }
    if (spec->placement == RunnerSpec::Placement::kGce) {
      // The instance first: until it runs there is no agent to wait for.
      auto instance = ReconcileInstance(*obj, *spec, st);
      if (!instance.ok()) return instance.error();
      requeue = instance->requeue_after;
      set("InstanceReady", instance->ready, instance->reason, instance->message);
      if (!instance->ready && address.empty()) {
        StopLink(name);
        st["phase"] = "Pending";
        set("Linked", false, instance->reason, instance->message);
        set("Ready", false, instance->reason, instance->message);
        return write();
      }
    }
    if (spec->placement == RunnerSpec::Placement::kMarketplace) {
      // The rented machine first: until its container runs there is no agent to wait for.
      auto machine = ReconcileMachine(*obj, *spec, st);
      if (!machine.ok()) return machine.error();
      requeue = machine->requeue_after;
      set("MachineReady", machine->ready, machine->reason, machine->message);
      if (!machine->ready && address.empty()) {
        StopLink(name);
        st["phase"] = "Pending";
        set("Linked", false, machine->reason, machine->message);
        set("Ready", false, machine->reason, machine->message);
        return write();
      }
    }
    if (address.empty()) {
      StopLink(name);
      st["phase"] = "Pending";
      std::string msg = spec->placement == RunnerSpec::Placement::kGce
                            ? "the instance is running; waiting for its agent to link"
                        : spec->placement == RunnerSpec::Placement::kMarketplace
                            ? "the machine is running; waiting for its agent to link"
                            : "waiting for the agent to link with its join token";
      set("Linked", false, "WaitingForAgent", msg);
      set("Ready", false, "WaitingForAgent", msg);
      return write();
    }
    // Attested when the Runner says so or its ControlNode names an AttestationPolicy for all
    // its runners (a sealed ControlNode alone is the workload policy, not attestation).
    const bool sealed_runner = spec->sealed || !cn->attestation_policy.empty();
    const std::string policy =
        spec->attestation_policy.empty() ? cn->attestation_policy : spec->attestation_policy;
    auto link = EnsureLink(*spec, address, sealed_runner, policy);
    if (!link.ok()) {
      st["phase"] = "Pending";
      set("Linked", false, "CredentialsUnavailable", link.error().message);
      set("Ready", false, "CredentialsUnavailable", link.error().message);
      (void)write();
      return link.error();
    }
    AgentSnapshot snap = (*link)->Snapshot(false);
    st["address"] = address;
    std::string was_phase(StringField(old_status, "phase"));
    std::string phase = snap.healthy ? "Linked"
                        : (snap.answered || was_phase == "Linked" || was_phase == "Unhealthy")
                            ? "Unhealthy"
                            : "Linking";
    std::shared_ptr<RunnerAttestation> attestation = sealed_runner ? Attestation(name) : nullptr;
    std::optional<AttestationState> att;
    if (attestation) att = attestation->State();
    if (att && att->verdict == AttestationState::Verdict::kUntrusted) phase = kUntrustedPhase;
    st["phase"] = phase;
    if (att) {
      json::array mismatches;
      for (const auto& m : att->mismatches) mismatches.emplace_back(m);
      json::object a{{"policy", att->policy},
                     {"trusted", att->verdict == AttestationState::Verdict::kTrusted},
                     {"mismatches", mismatches}};
      if (!att->ek_subject.empty()) a["ekSubject"] = att->ek_subject;
      if (att->last_appraisal.time_since_epoch().count() > 0) {
        // Like lastSeen: refreshed when the verdict changes or every unhealthy_after/2.
        const json::object* prev_a = old_status ? ObjectField(*old_status, "attestation") : nullptr;
        auto prev = kube::ParseTime(prev_a ? StringField(*prev_a, "lastAppraisal") : "");
        bool same = prev_a && jsonfield::BoolField(*prev_a, "trusted").value_or(false) ==
                                  (att->verdict == AttestationState::Verdict::kTrusted);
        a["lastAppraisal"] = same && prev && att->last_appraisal - *prev < o_.unhealthy_after / 2
                                 ? StringValue(*prev_a, "lastAppraisal")
                                 : kube::FormatTime(att->last_appraisal);
      }
      st["attestation"] = a;
      const bool trusted = att->verdict == AttestationState::Verdict::kTrusted;
      const kube::Object* before = obj.get();
      bool was = false;
      std::string was_message;
      if (const json::array* conds = old_status ? ArrayField(*old_status, "conditions") : nullptr) {
        for (const auto& c : *conds) {
          if (c.is_object() && StringField(c.as_object(), "type") == kAttestedCondition) {
            was = StringField(c.as_object(), "status") == "True";
            was_message = StringValue(c.as_object(), "message");
          }
        }
      }
      set(kAttestedCondition, trusted, att->reason, att->message);
      if (!trusted && att->verdict == AttestationState::Verdict::kUntrusted &&
          (was || was_message != att->message)) {
        events_->Event(*before, kube::EventType::kWarning, "RunnerUntrusted", att->message);
      } else if (trusted && !was) {
        events_->Event(*before, kube::EventType::kNormal, "RunnerAttested", att->message);
      }
    } else {
      st.erase("attestation");
    }
    if (snap.info) {
      json::object caps;
      for (const auto& [k, v] : snap.info->capacity()) caps[k] = v;
      st["capacity"] = caps;
      st["bootID"] = snap.info->boot_id();
      st["agentVersion"] = snap.info->agent_version();
      if (!snap.info->region().empty()) st["region"] = snap.info->region();
      if (!snap.info->zone().empty()) st["zone"] = snap.info->zone();
    }
    if (!snap.identity.fingerprint.empty()) {
      st["identity"] = json::object{{"serial", snap.identity.serial},
                                    {"notAfter", snap.identity.not_after},
                                    {"fingerprint", snap.identity.fingerprint}};
    }
    std::string health_msg = snap.healthy ? "answering"
                             : snap.info && !snap.info->healthy()
                                 ? "agent reports unhealthy: " + snap.info->health_message()
                                 : "no answer: " + snap.last_error;
    st["health"] = json::object{{"healthy", snap.healthy}, {"message", health_msg}};
    if (snap.answered && snap.last_seen.time_since_epoch().count() > 0) {
      // lastSeen is refreshed at most every unhealthy_after/2 (not every probe).
      auto prev = kube::ParseTime(old_status ? StringField(*old_status, "lastSeen") : "");
      if (!prev || snap.last_seen - *prev >= o_.unhealthy_after / 2 || phase != was_phase) {
        st["lastSeen"] = kube::FormatTime(snap.last_seen);
      }
    }
    set("Linked", snap.answered, snap.answered ? "AgentAnswered" : "Linking",
        snap.answered ? "the agent answered over the runner link" : "dialing " + address);
    set("Healthy", snap.healthy, snap.healthy ? "AgentHealthy" : "AgentUnreachable", health_msg);
    if (att && att->verdict != AttestationState::Verdict::kTrusted && snap.healthy) {
      set("Ready", false, att->reason, att->message);
    } else {
      set("Ready", snap.healthy, snap.healthy ? "Linked" : phase, health_msg);
    }
    if (snap.healthy) {
      Status rm = tokens_->Remove(name);  // linked: the token, if any, is spent
      if (!rm.ok())
        log::Warn("join token cleanup", {{"runner", name}, {"error", rm.error().message}});
      st.erase("joinTokenSecret");
    }
    if (phase != was_phase) {
      events_->Event(*obj,
                     phase == "Unhealthy" ? kube::EventType::kWarning : kube::EventType::kNormal,
                     phase == "Linked" ? "RunnerLinked" : "Runner" + phase, health_msg);
      registry_
          .GetCounter("hyperslice_runners_runner_transitions_total", "Runner phase transitions",
                      {{"phase", phase}})
          .Inc();
    }
    registry_
        .GetGauge("hyperslice_runners_runner_healthy", "1 when the runner is healthy",
                  {{"runner", name}})
        .Set(snap.healthy ? 1 : 0);
    cn_ctrl_->Enqueue(spec->control_node);
    EnqueuePodsOfRunner(spec->control_node, name);
    return write();
  }

  // --- spec.gce: the Runner's instance (gce_runner.h) -------------------------------------------
  Result<ProvisionOutcome> ReconcileInstance(const kube::Object& obj, const RunnerSpec& spec,
                                             json::object& st) {
    const std::string name = spec.name;
    if (!gce_.configured()) {
      return ProvisionOutcome{.reason = "GceNotConfigured",
                              .message =
                                  "the operator cannot create instances: it needs a Compute "
                                  "Engine client and the link address instances dial "
                                  "(--runners-link-advertise-address)"};
    }
    HS_RETURN_IF_ERROR(AddFinalizer(obj, kInstanceFinalizer));
    auto outcome = gce_.Reconcile(obj, spec, st);
    if (outcome.ok() && outcome->warning) {
      events_->Event(obj, kube::EventType::kWarning, "InstanceCreateFailed",
                     outcome->reason + ": " + outcome->message);
    }
    return outcome;
  }

  // --- spec.marketplace: the Runner's rented machine (market_runner.h) ---------------------------
  Status AddFinalizer(const kube::Object& obj, const char* finalizer) {
    if (kube::HasFinalizer(obj, finalizer)) return OkStatus();
    json::array fins;
    if (const json::object* meta = ObjectField(obj, "metadata")) {
      if (const json::array* f = ArrayField(*meta, "finalizers")) fins = *f;
    }
    fins.push_back(json::value(finalizer));
    json::object patch{
        {"metadata", json::object{{"finalizers", fins},
                                  {"resourceVersion", std::string(kube::ResourceVersionOf(obj))}}}};
    auto r = client_->Patch(Runners(), "", std::string(kube::MetaString(obj, "name")),
                            kube::PatchType::kMerge, json::serialize(patch));
    if (!r.ok()) return r.error();
    return OkStatus();
  }

  Result<ProvisionOutcome> ReconcileMachine(const kube::Object& obj, const RunnerSpec& spec,
                                            json::object& st) {
    if (!market_.configured()) {
      return ProvisionOutcome{.reason = "MarketNotConfigured",
                              .message =
                                  "the operator cannot rent machines: it needs the runner "
                                  "agent's container image (--runners-agent-image) and the "
                                  "link address machines dial "
                                  "(--runners-link-advertise-address)"};
    }
    HS_RETURN_IF_ERROR(AddFinalizer(obj, kMachineFinalizer));
    // The class first: it must outlive the machine, which is returned through it.
    // Read once: the provisioner rents with the class as Protect read it.
    kube::Object cls;
    HS_ASSIGN_OR_RETURN(auto use, classes_->Protect(spec.market.gpu_node_class, &cls));
    if (use == ClassProtection::Use::kDeleting && !HoldsMachine(ObjectField(st, "machine"))) {
      return ProvisionOutcome{.reason = "GPUNodeClassDeleting",
                              .message = "GPUNodeClass " + spec.market.gpu_node_class +
                                         " is being deleted: nothing is rented with it",
                              .requeue_after = Ms(5000)};
    }
    auto outcome =
        market_.Reconcile(obj, spec, st, use == ClassProtection::Use::kMissing ? nullptr : &cls);
    if (outcome.ok() && outcome->warning) {
      events_->Event(obj, kube::EventType::kWarning, "MachineLaunchFailed",
                     outcome->reason + ": " + outcome->message);
    }
    return outcome;
  }

  // A Runner going away: its rented machine (spec.marketplace), then the finalizer.
  Result<kube::ReconcileResult> FinalizeMachine(const kube::Object& obj, json::object& st) {
    const std::string name(kube::MetaString(obj, "name"));
    if (!market_.configured()) {
      log::Warn("runners: cannot return the machine of a Runner without marketplace settings",
                {{"runner", name}});
      return kube::ReconcileResult{.requeue_after = Ms(30000)};
    }
    auto gone = market_.Finalize(obj, st);
    if (!gone.ok()) {
      events_->Event(obj, kube::EventType::kWarning, "MachineReturnFailed", gone.error().message);
      return gone.error();
    }
    if (!*gone) {
      (void)PatchStatus(Runners(), "", name, st);
      return kube::ReconcileResult{.requeue_after = Ms(1000)};
    }
    // Recorded as returned first, so a Runner going at the same time does not count this one as
    // holding the class; then the class may go unless another Runner rents with it (before the
    // finalizer: a failed release is retried with the Runner still there to say which class).
    if (json::object* m = st.contains("machine") ? st["machine"].if_object() : nullptr;
        m != nullptr && (m->contains("id") || m->contains("launchAttempt"))) {
      (*m)["state"] = gpu::StateName(gpu::InstanceState::kTerminated);
      if (m->contains("launchAttempt")) (*m)["launchAttempt"] = nullptr;  // merge patch: dropped
      HS_RETURN_IF_ERROR(PatchStatus(Runners(), "", name, st));
    }
    if (auto spec = ParseRunner(obj); spec.ok() && !spec->market.gpu_node_class.empty()) {
      HS_RETURN_IF_ERROR(classes_->Release(spec->market.gpu_node_class, name));
    }
    std::string patch = kube::RemoveFinalizerPatch(obj, kMachineFinalizer);
    if (!patch.empty()) {
      auto r = client_->Patch(Runners(), "", name, kube::PatchType::kJson, patch);
      if (!r.ok() && r.error().code != Error::Code::kNotFound) return r.error();
    }
    events_->Event(obj, kube::EventType::kNormal, "MachineReturned",
                   "the Runner's machine was returned to its provider");
    return kube::ReconcileResult{};
  }

  // A Runner going away: its instance first (spec.gce), then the finalizer.
  Result<kube::ReconcileResult> FinalizeRunner(const kube::Object& obj, json::object& st) {
    const std::string name(kube::MetaString(obj, "name"));
    if (kube::HasFinalizer(obj, kMachineFinalizer)) return FinalizeMachine(obj, st);
    if (!kube::HasFinalizer(obj, kInstanceFinalizer)) return kube::ReconcileResult{};
    if (!gce_.configured()) {
      log::Warn("runners: cannot delete the instance of a Runner without a GCE client",
                {{"runner", name}});
      return kube::ReconcileResult{.requeue_after = Ms(30000)};
    }
    auto gone = gce_.Finalize(obj, st);
    if (!gone.ok()) return gone.error();
    if (!*gone) return kube::ReconcileResult{.requeue_after = Ms(1000)};
    std::string patch = kube::RemoveFinalizerPatch(obj, kInstanceFinalizer);
    if (!patch.empty()) {
      auto r = client_->Patch(Runners(), "", name, kube::PatchType::kJson, patch);
      if (!r.ok() && r.error().code != Error::Code::kNotFound) return r.error();
    }
    events_->Event(obj, kube::EventType::kNormal, "InstanceDeleted",
                   "instance " + GceInstanceName(name) + " deleted");
    return kube::ReconcileResult{};
  }

  // --- Pods -----------------------------------------------------------------------------------
  struct PodLookup {
    kube::ObjectPtr pod;
    std::string control_node;
    ControlNodeSpec spec;
    bool all_synced = true;
  };
  PodLookup FindPod(const std::string& key) {
    PodLookup out;
    std::vector<std::pair<std::string, NodeRuntime>> nodes;
    {
      std::lock_guard lock(mu_);
      for (const auto& [k, v] : nodes_) nodes.emplace_back(k, v);
    }
    for (auto& [name, n] : nodes) {
      if (!n.pods) continue;
      if (!n.pods->HasSynced()) out.all_synced = false;
      if (auto p = n.pods->store().Get(key)) {
        out.pod = p;
        out.control_node = name;
        out.spec = n.spec;
      }
    }
    return out;
  }

  std::vector<std::pair<std::string, std::shared_ptr<AgentLink>>> AllLinks() {
    std::lock_guard lock(mu_);
    std::vector<std::pair<std::string, std::shared_ptr<AgentLink>>> out;
    for (const auto& [k, v] : runners_) out.emplace_back(k, v.link);
    return out;
  }

  void Refuse(const kube::Object& pod, const std::string& reason, const std::string& message) {
    std::string now = kube::FormatTime(std::chrono::system_clock::now());
    json::array conds;
    if (const json::object* st = ObjectField(pod, "status")) {
      if (const json::array* cc = ArrayField(*st, "conditions")) {
        for (const auto& c : *cc) {
          if (c.is_object() && StringField(c.as_object(), "type") == "PodScheduled")
            conds.push_back(c);
        }
      }
    }
    conds.push_back(json::object{{"type", kRefusedCondition},
                                 {"status", "True"},
                                 {"reason", reason},
                                 {"message", message},
                                 {"lastTransitionTime", now},
                                 {"lastProbeTime", nullptr}});
    json::object status{{"phase", "Failed"},
                        {"reason", reason},
                        {"message", "Pod was refused by the control node: " + message},
                        {"conditions", conds}};
    Status st =
        PatchStatus(kube::resources::Pods(), std::string(kube::MetaString(pod, "namespace")),
                    std::string(kube::MetaString(pod, "name")), status);
    if (!st.ok()) {
      log::Warn("pod refusal not written",
                {{"pod", kube::ObjectKey(pod)}, {"error", st.error().message}});
    }
    events_->Event(pod, kube::EventType::kWarning, reason, message);
    registry_
        .GetCounter("hyperslice_runners_pods_refused_total", "Pods the control node refused",
                    {{"reason", reason}})
        .Inc();
    log::Info("pod refused", {{"pod", kube::ObjectKey(pod)}, {"reason", reason}});
  }

  // Requests already placed on each runner (non-terminal pods of the node, plus placements not
  // yet visible in the cache).
  std::map<std::string, ResourceList> UsedByRunner(const std::string& control_node) {
    std::shared_ptr<kube::SharedInformer> inf;
    {
      std::lock_guard lock(mu_);
      auto it = nodes_.find(control_node);
      if (it != nodes_.end()) inf = it->second.pods;
    }
    std::map<std::string, ResourceList> used;
    std::set<std::string> seen_uids;
    if (inf) {
      for (const auto& p : inf->store().List()) {
        auto runners = SplitComma(Annotation(*p, kRunnerAnnotation));
        if (runners.empty() || Terminal(PodPhase(*p))) continue;
        seen_uids.insert(std::string(kube::MetaString(*p, "uid")));
        auto needs = NeedsOf(*p);
        if (!needs.ok()) continue;
        ResourceList share = PerHostShare(needs->requests, needs->hosts);
        share["pods"] += 1000;
        for (const auto& r : runners) {
          for (const auto& [k, v] : share) used[r][k] += v;
        }
      }
    }
    std::lock_guard lock(mu_);
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (seen_uids.count(it->first)) {
        it = pending_.erase(it);
        continue;
      }
      for (const auto& r : it->second.runners) {
        for (const auto& [k, v] : it->second.share) used[r][k] += v;
      }
      ++it;
    }
    return used;
  }

  Result<kube::ReconcileResult> ReconcilePod(const std::string& key) {
    auto [ns, name] = kube::Controller::SplitKey(key);
    PodLookup found = FindPod(key);
    auto links = AllLinks();
    std::string uid = found.pod ? std::string(kube::MetaString(*found.pod, "uid")) : "";
    // Whatever an agent holds under this name that is not this pod: a deleted pod, or an
    // earlier pod of the same name. Only once every cache is complete.
    if (found.all_synced) {
      for (const auto& [runner, link] : links) {
        for (const auto& other : link->UidsNamed(ns, name)) {
          if (other == uid) continue;
          Status st = link->DeletePod(other, 0);
          if (!st.ok()) return st.error();
          log::Info("deleted a pod the API no longer has from its runner",
                    {{"pod", key}, {"runner", runner}});
        }
      }
    }
    if (!found.pod) return kube::ReconcileResult{};
    const kube::Object& pod = *found.pod;
    std::vector<std::string> runners = SplitComma(Annotation(pod, kRunnerAnnotation));
    if (runners.empty()) {
      std::lock_guard lock(mu_);
      if (auto it = pending_.find(uid); it != pending_.end()) runners = it->second.runners;
    }

    if (kube::IsDeleting(pod)) {
      const json::object* spec = ObjectField(pod, "spec");
      int64_t grace =
          spec ? jsonfield::IntField(*spec, "terminationGracePeriodSeconds").value_or(30) : 30;
      for (const auto& r : runners) {
        auto link = Link(r);
        if (!link) continue;
        Status st = link->DeletePod(uid, grace);
        // An unreachable runner's copy is removed when it relinks (the API no longer has it).
        if (!st.ok() && link->Snapshot(false).healthy) return st.error();
      }
      kube::DeleteOptions d;
      d.grace_period_seconds = 0;
      d.precondition_uid = uid;
      Status del = client_->Delete(kube::resources::Pods(), ns, name, d);
      if (!del.ok() && del.error().code != Error::Code::kNotFound &&
          del.error().code != Error::Code::kConflict) {
        return del.error();
      }
      std::lock_guard lock(mu_);
      pending_.erase(uid);
      return kube::ReconcileResult{};
    }

    std::string phase = PodPhase(pod);
    if (Terminal(phase)) {
      // A pod failed as RunnerLost whose runner came back: its copy there must not run on.
      const json::object* st = ObjectField(pod, "status");
      if (st != nullptr && (StringField(*st, "reason") == kRunnerLostReason ||
                            StringField(*st, "reason") == kRunnerUntrustedReason)) {
        for (const auto& r : runners) {
          auto link = Link(r);
          if (link && link->Pod(uid)) HS_RETURN_IF_ERROR(link->DeletePod(uid, 0));
        }
      }
      return kube::ReconcileResult{};
    }

    // A sealed control node checks the workload policy once per reconcile that would start the
    // pod somewhere (not on status updates of a running pod): true = admitted, false = refused.
    bool policy_checked = !found.spec.sealed;
    auto admitted_by_policy = [&]() -> Result<bool> {
      if (policy_checked) return true;
      Status st = CheckWorkloadPolicy(pod, found.spec);
      if (st.ok()) {
        policy_checked = true;
        return true;
      }
      if (st.error().code == Error::Code::kForbidden) {
        Refuse(pod, st.error().reason, st.error().message);
        return false;
      }
      events_->Event(pod, kube::EventType::kWarning, "WorkloadPolicyUnavailable",
                     st.error().message);
      return st.error();
    };

    std::optional<v1::RunPodRequest> req;
    auto build = [&]() -> Status {
      auto r = BuildRunPod(pod, inputs_, found.spec.node_name, found.spec.address);
      if (!r.ok()) return r.error();
      req = std::move(*r);
      return OkStatus();
    };

    if (runners.empty()) {
      HS_ASSIGN_OR_RETURN(bool admitted, admitted_by_policy());
      if (!admitted) return kube::ReconcileResult{};
      auto needs = NeedsOf(pod);
      if (!needs.ok()) {
        Refuse(pod, needs.error().reason, needs.error().message);
        return kube::ReconcileResult{};
      }
      Status built = build();
      if (!built.ok()) {
        if (built.error().code == Error::Code::kInvalidArgument) {
          Refuse(pod, built.error().reason, built.error().message);
          return kube::ReconcileResult{};
        }
        events_->Event(pod, kube::EventType::kWarning, "FailedToResolveInputs",
                       built.error().message);
        return built.error();
      }
      PlacementDecision d;
      {
        std::lock_guard place(place_mu_);
        auto used = UsedByRunner(found.control_node);
        std::vector<RunnerCandidate> cands;
        for (const auto& r : RunnersOf(found.spec)) {
          auto link = Link(r.name);
          if (!link) continue;
          AgentSnapshot s = link->Snapshot(false);
          RunnerCandidate c;
          c.name = r.name;
          c.healthy = Usable(r.name, s);
          c.slice = s.info && !s.info->slice().empty() ? s.info->slice() : r.slice;
          c.slice_index =
              s.info && !s.info->slice().empty() ? s.info->slice_index() : r.slice_index;
          if (s.info) c.capacity = RunnerCapacity(*s.info, found.spec);
          c.used = used[r.name];
          // The stricter of the Runner's policy and what its agent says.
          c.allow_host_network = r.allow_host_network && (!s.info || !s.info->has_policy() ||
                                                          s.info->policy().allow_host_network());
          c.require_digest = r.require_digest || (s.info && s.info->policy().require_digest());
          cands.push_back(std::move(c));
        }
        PodNeeds n = *needs;
        n.requests["pods"] = int64_t{1000} * n.hosts;  // one pod slot on each host
        d = Place(n, cands);
        if (!d.runners.empty()) {
          ResourceList share = PerHostShare(needs->requests, needs->hosts);
          share["pods"] += 1000;
          std::lock_guard lock(mu_);
          pending_[uid] = Assignment{d.runners, share};
        }
      }
      if (d.runners.empty()) {
        if (d.permanent) {
          Refuse(pod, d.reason, d.message);
          return kube::ReconcileResult{};
        }
        events_->Event(pod, kube::EventType::kNormal, d.reason, d.message);
        kube::ReconcileResult rr;
        rr.requeue_after = std::max<Ms>(o_.probe_interval, Ms(1000));
        return rr;
      }
      json::object patch{
          {"metadata",
           json::object{{"annotations", json::object{{kRunnerAnnotation, JoinComma(d.runners)}}}}}};
      auto patched = client_->Patch(kube::resources::Pods(), ns, name, kube::PatchType::kMerge,
                                    json::serialize(patch));
      if (!patched.ok()) {
        std::lock_guard lock(mu_);
        pending_.erase(uid);
        if (patched.error().code == Error::Code::kNotFound) return kube::ReconcileResult{};
        return patched.error();
      }
      runners = d.runners;
      events_->Event(pod, kube::EventType::kNormal, "RunnerAssigned",
                     "placed on runner " + JoinComma(d.runners));
    }

    // Every host runs the pod (RunPod is idempotent by uid); a runner lost past the bound fails
    // it.
    std::vector<v1::PodStatus> statuses;
    for (const auto& r : runners) {
      auto link = Link(r);
      AgentSnapshot s = link ? link->Snapshot(false) : AgentSnapshot{};
      if (!link || !s.healthy) {
        bool lost = !link || s.answered ||
                    (std::chrono::system_clock::now() - s.last_seen > o_.unhealthy_after &&
                     s.last_seen.time_since_epoch().count() > 0);
        if (lost) {
          RunnerLost(pod, r,
                     !link ? "runner " + r + " is no longer linked to this control node"
                           : "runner " + r + " stopped answering: " + s.last_error);
          return kube::ReconcileResult{};
        }
        return kube::ReconcileResult{};  // not linked yet: its link change re-enqueues this pod
      }
      if (auto a = Attestation(r)) {
        AttestationState as = a->State();
        if (as.verdict == AttestationState::Verdict::kUntrusted) {
          RunnerLost(pod, r, "runner " + r + " is untrusted: " + as.message,
                     kRunnerUntrustedReason);
          return kube::ReconcileResult{};
        }
        // Not appraised yet: its verdict re-enqueues this pod.
        if (as.verdict != AttestationState::Verdict::kTrusted) return kube::ReconcileResult{};
      }
      if (!s.pods_synced) return kube::ReconcileResult{};  // re-enqueued once listed
      std::optional<v1::PodStatus> have = link->Pod(uid);
      if (!have) {
        HS_ASSIGN_OR_RETURN(bool admitted, admitted_by_policy());
        if (!admitted) return kube::ReconcileResult{};
        if (!req) {
          Status built = build();
          if (!built.ok()) {
            if (built.error().code == Error::Code::kInvalidArgument) {
              Refuse(pod, built.error().reason, built.error().message);
              return kube::ReconcileResult{};
            }
            return built.error();
          }
        }
        // What the agent must measure before the containers start.
        if (auto a = Attestation(r)) a->ExpectWorkload(*req);
        auto start = std::chrono::steady_clock::now();
        auto ran = link->RunPod(*req);
        if (!ran.ok()) {
          if (ran.error().code == Error::Code::kInvalidArgument) {
            Refuse(pod, "RefusedByRunner", ran.error().message);
            return kube::ReconcileResult{};
          }
          events_->Event(pod, kube::EventType::kWarning, "RunPodFailed", ran.error().message);
          return ran.error();
        }
        registry_
            .GetHistogram("hyperslice_runners_run_pod_seconds",
                          "RunPod latency as the control node sees it", {},
                          kube::metrics::DefaultBuckets())
            .Observe(
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
        registry_
            .GetCounter("hyperslice_runners_pods_started_total", "RunPod calls that succeeded",
                        {{"control_node", found.control_node}})
            .Inc();
        have = *ran;
      }
      statuses.push_back(*have);
    }
    if (statuses.empty()) return kube::ReconcileResult{};
    auto patch = StatusPatch(pod, DesiredStatus(pod, statuses, found.spec.address));
    if (patch) {
      kube::PatchOptions po;
      po.subresource = "status";
      auto r = client_->Patch(kube::resources::Pods(), ns, name, kube::PatchType::kMerge,
                              json::serialize(*patch), po);
      if (!r.ok() && r.error().code != Error::Code::kNotFound) return r.error();
    }
    return kube::ReconcileResult{};
  }

  void RunnerLost(const kube::Object& pod, const std::string& runner, const std::string& msg,
                  const char* reason = kRunnerLostReason) {
    std::string now = kube::FormatTime(std::chrono::system_clock::now());
    json::array cs;
    if (const json::object* st = ObjectField(pod, "status")) {
      if (const json::array* have = ArrayField(*st, "containerStatuses")) {
        for (const auto& c : *have) {
          if (!c.is_object()) continue;
          json::object o = c.as_object();
          if (o.contains("state") && ObjectField(o, "state") &&
              ObjectField(*ObjectField(o, "state"), "terminated")) {
            cs.push_back(std::move(o));
            continue;
          }
          o["ready"] = false;
          o["started"] = false;
          o["state"] = json::object{
              {"terminated",
               json::object{
                   {"exitCode", 137}, {"reason", reason}, {"message", msg}, {"finishedAt", now}}}};
          cs.push_back(std::move(o));
        }
      }
    }
    json::object status{{"phase", "Failed"}, {"reason", reason}, {"message", msg}};
    if (!cs.empty()) status["containerStatuses"] = cs;
    Status st =
        PatchStatus(kube::resources::Pods(), std::string(kube::MetaString(pod, "namespace")),
                    std::string(kube::MetaString(pod, "name")), status);
    if (!st.ok()) {
      log::Warn("RunnerLost not written",
                {{"pod", kube::ObjectKey(pod)}, {"error", st.error().message}});
      return;
    }
    events_->Event(pod, kube::EventType::kWarning, reason, msg);
    registry_
        .GetCounter("hyperslice_runners_pods_lost_total",
                    "Pods failed because their runner was lost", {{"runner", runner}})
        .Inc();
  }

  OperatorOptions o_;
  std::shared_ptr<kube::Client> client_;
  ApiInputs inputs_;
  std::shared_ptr<SecretJoinTokens> tokens_;
  GceRunnerProvisioner gce_;
  MarketRunnerProvisioner market_;
  std::unique_ptr<ClassProtection> classes_;  // GPUNodeClasses kept while Runners rent with them
  kube::metrics::Registry& registry_;
  std::shared_ptr<kube::EventRecorder> events_;
  std::unique_ptr<policy::SignatureSource> signatures_;  // sealed control nodes' image checks
  std::shared_ptr<kube::SharedInformer> cn_informer_, runner_informer_;
  std::shared_ptr<kube::Controller> cn_ctrl_, runner_ctrl_, pod_ctrl_;
  std::shared_ptr<attest::NonceRegistry> nonces_;  // one verifier: nonces for every runner
  std::string boot_id_ = kube::FormatMicroTime(std::chrono::system_clock::now());

  std::mutex place_mu_;                         // one placement at a time (capacity accounting)
  std::mutex mu_;                               // nodes_, runners_, pending_
  std::map<std::string, NodeRuntime> nodes_;    // by ControlNode name
  std::map<std::string, RunnerEntry> runners_;  // by Runner name
  std::map<std::string, Assignment> pending_;   // by pod uid, until the cache has the annotation
};

}  // namespace

Result<std::shared_ptr<ControlNodeSet>> RegisterOperator(kube::Manager& mgr, OperatorOptions o) {
  if (!o.client) return Error::Make(Error::Code::kInvalidArgument, "runners: client is required");
  if (o.ns.empty())
    return Error::Make(Error::Code::kInvalidArgument, "runners: namespace is required");
  if (!o.agent_credentials) {
    return Error::Make(Error::Code::kInvalidArgument, "runners: agent credentials are required");
  }
  if (mgr.informers() == nullptr) {
    return Error::Make(Error::Code::kInvalidArgument, "runners: the manager has no client");
  }
  auto sys = std::make_shared<System>(mgr, std::move(o));
  HS_RETURN_IF_ERROR(sys->Register(mgr));
  return std::shared_ptr<ControlNodeSet>(sys);
}

}  // namespace hyperslice::runners::controlnode
