// The RunnerAgent gRPC service and the Agent that composes images, runtime and pods (agent.h).
#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <grpcpp/grpcpp.h>
#include <grpcpp/security/credentials.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <random>

#include "src/base/log.h"
#include "src/runners/agent.grpc.pb.h"
#include "src/runners/agent/agent.h"
#include "src/runners/agent/attester.h"
#include "src/runners/agent/cri_runtime.h"
#include "src/runners/agent/pods.h"
#include "src/runners/agent/runc_runtime.h"
#include "src/runners/sealed/sealed.h"

namespace hyperslice::runners::agent {
namespace fs = std::filesystem;

extern "C" char** environ;  // NOLINT(readability-redundant-declaration): POSIX leaves it undeclared

namespace {

constexpr char kAgentVersion[] = "hyperslice-runner-agent/0.1";

grpc::Status ToGrpc(const Error& e) {
  grpc::StatusCode code = grpc::StatusCode::INTERNAL;
  switch (e.code) {
    case Error::Code::kInvalidArgument:
      code = grpc::StatusCode::INVALID_ARGUMENT;
      break;
    case Error::Code::kNotFound:
      code = grpc::StatusCode::NOT_FOUND;
      break;
    case Error::Code::kForbidden:  // policy refusals
    case Error::Code::kConflict:
      code = grpc::StatusCode::FAILED_PRECONDITION;
      break;
    case Error::Code::kUnavailable:
      code = grpc::StatusCode::UNAVAILABLE;
      break;
    default:
      break;
  }
  return {code, e.reason.empty() ? e.message : e.reason + ": " + e.message};
}

std::string NewBootId() {
  std::random_device rd;
  std::array<char, 37> buf{};
  std::snprintf(buf.data(), buf.size(), "%08x-%04x-%04x-%04x-%04x%08x", rd(), rd() & 0xffff,
                rd() & 0xffff, rd() & 0xffff, rd() & 0xffff, rd());
  return buf.data();
}

class Service final : public v1::RunnerAgent::Service {
 public:
  Service(const AgentOptions& o, PodManager& pods, ContainerRuntime& runtime, std::string boot_id,
          Attester* attester)
      : o_(o), pods_(pods), runtime_(runtime), boot_id_(std::move(boot_id)), attester_(attester) {}

  grpc::Status Info(grpc::ServerContext* ctx, const v1::InfoRequest*, v1::RunnerInfo* r) override {
    if (auto st = Authorize(ctx); !st.ok()) return st;
    r->set_runner_name(o_.runner_name);
    r->set_region(o_.region);
    r->set_zone(o_.zone);
    for (const auto& [k, v] : o_.capacity) (*r->mutable_capacity())[k] = v;
    std::string unhealthy = runtime_.Health();
    r->set_healthy(unhealthy.empty());
    if (!unhealthy.empty()) r->set_health_message(unhealthy);
    r->set_agent_version(kAgentVersion);
    r->set_boot_id(boot_id_);
    r->mutable_policy()->set_allow_host_network(o_.allow_host_network);
    r->mutable_policy()->set_require_digest(o_.require_digest);
    r->mutable_policy()->set_sealed(o_.sealed);
    r->set_slice(o_.slice);
    r->set_slice_index(o_.slice_index);
    return grpc::Status::OK;
  }

  grpc::Status RunPod(grpc::ServerContext* ctx, const v1::RunPodRequest* req,
                      v1::PodStatus* resp) override {
    if (auto st = Authorize(ctx); !st.ok()) return st;
    auto r = pods_.Run(*req);
    if (!r.ok()) {
      log::Warn("pod refused", {{"uid", req->pod().uid()}, {"reason", r.error().message}});
      return ToGrpc(r.error());
    }
    *resp = *r;
    return grpc::Status::OK;
  }

  grpc::Status DeletePod(grpc::ServerContext* ctx, const v1::DeletePodRequest* req,
                         v1::DeletePodResponse*) override {
    if (auto st = Authorize(ctx); !st.ok()) return st;
    std::optional<std::chrono::seconds> grace;
    // 0 is a grace of none (SIGKILL at once), not "the pod's": a control node force-deleting a
    // lost runner's pod must not wait out a container that ignores SIGTERM.
    if (req->has_grace_seconds()) {
      grace = std::chrono::seconds(std::max<int64_t>(req->grace_seconds(), 0));
    }
    if (Status st = pods_.Delete(req->uid(), grace); !st.ok()) return ToGrpc(st.error());
    if (attester_ != nullptr) attester_->ForgetPod(req->uid());
    return grpc::Status::OK;
  }

  grpc::Status ListPods(grpc::ServerContext* ctx, const v1::ListPodsRequest*,
                        v1::ListPodsResponse* resp) override {
    if (auto st = Authorize(ctx); !st.ok()) return st;
    for (auto& p : pods_.List()) *resp->add_pods() = std::move(p);
    return grpc::Status::OK;
  }

  grpc::Status WatchPods(grpc::ServerContext* ctx, const v1::WatchPodsRequest*,
                         grpc::ServerWriter<v1::PodStatus>* writer) override {
    if (auto st = Authorize(ctx); !st.ok()) return st;
    auto watch = pods_.Subscribe();
    while (!ctx->IsCancelled() && !stopping_) {
      auto s = watch->Next(std::chrono::milliseconds(250));
      if (s && !writer->Write(*s)) break;
    }
    return grpc::Status::OK;
  }

  grpc::Status Logs(grpc::ServerContext* ctx, const v1::LogsRequest* req,
                    grpc::ServerWriter<v1::LogChunk>* writer) override {
    if (auto st = Authorize(ctx); !st.ok()) return st;
    if (o_.workload_policy && !o_.workload_policy->allow_logs) {
      return {grpc::StatusCode::PERMISSION_DENIED,
              std::string(policy::kReasonLogs) +
                  ": this runner is sealed and its workload policy " + o_.workload_policy->name +
                  " does not allow logs"};
    }
    auto target = pods_.Log(req->uid(), req->container(), req->previous());
    if (!target.ok()) return ToGrpc(target.error());
    LogOptions lo;
    lo.follow = req->follow();
    lo.tail_lines = req->tail_lines() == 0 && !req->follow() ? -1 : req->tail_lines();
    if (req->tail_lines() == 0) lo.tail_lines = -1;
    if (req->since_seconds() > 0) {
      lo.since_unix = std::chrono::duration_cast<std::chrono::seconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count() -
                      req->since_seconds();
    }
    lo.timestamps = req->timestamps();
    lo.limit_bytes = req->limit_bytes();
    auto sink = [&](const std::string& data) {
      if (ctx->IsCancelled() || stopping_) return false;
      if (data.empty()) return true;
      v1::LogChunk chunk;
      chunk.set_data(data);
      return writer->Write(chunk);
    };
    auto finished = [&] { return stopping_.load() || target->finished(); };
    if (Status st = StreamLog(target->path, lo, sink, finished); !st.ok())
      return ToGrpc(st.error());
    return grpc::Status::OK;
  }

  grpc::Status Exec(grpc::ServerContext* ctx,
                    grpc::ServerReaderWriter<v1::ExecOutput, v1::ExecInput>* stream) override {
    if (auto st = Authorize(ctx); !st.ok()) return st;
    // No administrative access to a sealed runner's workloads, whoever asks (issue 21 §5): a
    // sealed agent refuses exec whether or not it was given a workload policy.
    if (o_.sealed || o_.workload_policy) {
      return {grpc::StatusCode::PERMISSION_DENIED,
              std::string(policy::kReasonAdminAccess) +
                  ": exec is refused: this runner is sealed (no administrative access to its "
                  "workloads)"};
    }
    v1::ExecInput first;
    if (!stream->Read(&first) || !first.has_start()) {
      return {grpc::StatusCode::INVALID_ARGUMENT, "the first message must be ExecInput.start"};
    }
    if (first.start().command().empty()) {
      return {grpc::StatusCode::INVALID_ARGUMENT, "exec needs a command"};
    }
    return pods_.Exec(first.start(), ctx, stream);
  }

  grpc::Status AttestationIdentity(grpc::ServerContext* ctx, const v1::AttestationIdentityRequest*,
                                   v1::AttestationIdentityResponse* resp) override {
    if (auto st = Sealed(ctx); !st.ok()) return st;
    auto r = attester_->Identity();
    if (!r.ok()) return ToGrpc(r.error());
    *resp = std::move(*r);
    return grpc::Status::OK;
  }

  grpc::Status ActivateCredential(grpc::ServerContext* ctx,
                                  const v1::ActivateCredentialRequest* req,
                                  v1::ActivateCredentialResponse* resp) override {
    if (auto st = Sealed(ctx); !st.ok()) return st;
    auto r = attester_->ActivateCredential(req->credential_blob(), req->encrypted_secret());
    if (!r.ok()) return ToGrpc(r.error());
    resp->set_secret(*r);
    return grpc::Status::OK;
  }

  grpc::Status Attest(grpc::ServerContext* ctx, const v1::AttestRequest* req,
                      v1::AttestResponse* resp) override {
    if (auto st = Sealed(ctx); !st.ok()) return st;
    if (req->nonce().size() != 32) return {grpc::StatusCode::INVALID_ARGUMENT, "nonce: 32 bytes"};
    auto r = attester_->Quote(req->nonce(), req->report_data());
    if (!r.ok()) return ToGrpc(r.error());
    *resp = std::move(*r);
    return grpc::Status::OK;
  }

  void SetStopping() { stopping_ = true; }

 private:
  grpc::Status Sealed(grpc::ServerContext* ctx) const {
    if (auto st = Authorize(ctx); !st.ok()) return st;
    if (attester_ == nullptr) {
      return {grpc::StatusCode::FAILED_PRECONDITION,
              std::string(sealed::kReasonNotSealed) + ": this runner agent is not sealed"};
    }
    return grpc::Status::OK;
  }

  // gRPC verified the client's chain against the runners CA (and its validity); only a control
  // node's identity may drive this runner.
  static grpc::Status Authorize(grpc::ServerContext* ctx) {
    auto certs = ctx->auth_context()->FindPropertyValues("x509_pem_cert");
    if (certs.empty()) {
      return {grpc::StatusCode::UNAUTHENTICATED, "a control node's client certificate is required"};
    }
    if (!link::IsControlNodeIdentity(std::string(certs.front().data(), certs.front().size()))) {
      return {grpc::StatusCode::PERMISSION_DENIED,
              "the client certificate is not a control node's identity"};
    }
    return grpc::Status::OK;
  }

  const AgentOptions& o_;
  PodManager& pods_;
  ContainerRuntime& runtime_;
  std::string boot_id_;
  Attester* attester_;  // null unless sealed
  std::atomic<bool> stopping_{false};
};

class AgentImpl final : public Agent {
 public:
  explicit AgentImpl(AgentOptions o) : o_(std::move(o)) {}
  ~AgentImpl() override { Stop(); }

  Status Init() {
    if (o_.state_dir.empty())
      return Error::Make(Error::Code::kInvalidArgument, "state dir is required");
    if (o_.identity.cert_pem.empty() || o_.identity.ca_pem.empty()) {
      return Error::Make(Error::Code::kInvalidArgument, "the agent needs its linked identity");
    }
    std::error_code ec;
    fs::create_directories(o_.state_dir + "/runtime", ec);
    ::chmod(o_.state_dir.c_str(), 0700);
    if (o_.shim_argv.empty()) {
      o_.shim_argv = {fs::read_symlink("/proc/self/exe", ec).string(), "runner-agent", "shim"};
    }
    RegistryOptions ro;
    ro.insecure_registries = o_.insecure_registries;
    ro.ca_pem = o_.registry_ca_pem;
    // Names the agent to registries (and would name it in any server's logs it reached).
    ro.user_agent = "hyperslice-runner-agent";
    PodManagerOptions po;
    po.state_dir = o_.state_dir;
    po.allow_host_network = o_.allow_host_network;
    po.require_digest = o_.require_digest;
    for (const auto& d : o_.devices) {
      po.devices[d.resource].push_back(
          {d.host_path, d.container_path.empty() ? d.host_path : d.container_path});
    }
    auto host = link::HostOf(o_.advertise_address.empty() ? o_.listen : o_.advertise_address);
    po.host_ip = host.ok() ? *host : "";
    po.restart_backoff = o_.restart_backoff;
    HS_RETURN_IF_ERROR(MakeRuntime(ro));
    po.runtime = containers_.get();
    if (o_.workload_policy) {
      signatures_ = policy::NewRegistrySignatureSource(ro);
      po.workload_policy = &*o_.workload_policy;
      po.signatures = signatures_.get();
    }
    if (o_.sealed) {
      // Measured before anything runs: the binary and config, then every workload as it starts.
      AttesterOptions ao;
      ao.tcti = o_.tpm_tcti;
      ao.binary_path = o_.binary_path.empty() ? "/proc/self/exe" : o_.binary_path;
      ao.config_document = SealedConfigDocument(o_);
      ao.pods_dir = o_.state_dir + "/pods";
      ao.tokens = o_.attestation_tokens;
      ao.runners_ca_pem = o_.identity.ca_pem;
      HS_ASSIGN_OR_RETURN(attester_, Attester::Start(std::move(ao)));
      po.before_start = [a = attester_.get()](const v1::RunPodRequest& pod, const v1::Container& c,
                                              const Image& image) {
        return a->BeforeStart(pod, c, image);
      };
    }
    pods_ = std::make_unique<PodManager>(po);
    HS_RETURN_IF_ERROR(pods_->Recover());
    containers_->CollectOrphans(pods_->List());
    service_ = std::make_unique<Service>(o_, *pods_, *containers_, NewBootId(), attester_.get());
    return Serve(o_.listen);
  }

  int port() const override { return port_; }

  Status UpdateIdentity(const link::AgentIdentity& identity) override {
    std::lock_guard lock(mu_);
    o_.identity = identity;
    if (server_) {
      server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
      server_->Wait();
      server_.reset();
    }
    auto host = link::HostOf(o_.listen);
    return ServeLocked((host.ok() ? *host : "127.0.0.1") + ":" + std::to_string(port_));
  }

  void Stop() override {
    std::lock_guard lock(mu_);
    if (service_) service_->SetStopping();
    if (server_) {
      server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
      server_->Wait();
      server_.reset();
    }
    if (pods_) pods_->Shutdown();
  }

 private:
  Status Serve(const std::string& listen) {
    std::lock_guard lock(mu_);
    return ServeLocked(listen);
  }

  Status ServeLocked(const std::string& listen) {
    grpc::SslServerCredentialsOptions ssl(
        GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    ssl.pem_root_certs = o_.identity.ca_pem;
    ssl.pem_key_cert_pairs.push_back({o_.identity.key_pem, o_.identity.cert_pem});
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort(listen, grpc::SslServerCredentials(ssl), &port);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    if (!server_ || port == 0) {
      return Error::Make(Error::Code::kUnavailable, "cannot listen on " + listen);
    }
    port_ = port;
    log::Info("runner agent serving", {{"runner", o_.runner_name}, {"port", port_}});
    return OkStatus();
  }

  // The runc CLI path (default), or containerd's CRI with --container-runtime-endpoint.
  Status MakeRuntime(const RegistryOptions& ro) {
    if (!o_.container_runtime_endpoint.empty()) {
      if (o_.sealed || o_.workload_policy) {
        // A sealed runner measures each image it unpacks itself (attester.h); containerd's
        // images are not the agent's to measure.
        return Error::Make(Error::Code::kInvalidArgument,
                           "a sealed runner runs its containers with runc, not through "
                           "--container-runtime-endpoint");
      }
      CriRuntimeOptions co;
      co.endpoint = o_.container_runtime_endpoint;
      co.runner_name = o_.runner_name;
      HS_ASSIGN_OR_RETURN(containers_, NewCriRuntime(std::move(co)));
      return OkStatus();
    }
    runtime_ = std::make_unique<Runtime>(o_.runtime, o_.state_dir + "/runtime");
    images_ = std::make_unique<ImageStore>(o_.state_dir + "/images", ro);
    RuncRuntimeOptions rr;
    rr.runtime = runtime_.get();
    rr.images = images_.get();
    rr.shim_argv = o_.shim_argv;
    if (!o_.pod_cidr.empty()) {
      PodNetworkOptions no;
      no.cidr = o_.pod_cidr;
      no.bridge = o_.pod_bridge;
      no.pods_dir = o_.state_dir + "/pods";
      HS_ASSIGN_OR_RETURN(network_, PodNetwork::Make(std::move(no)));
      rr.network = network_.get();
    }
    containers_ = NewRuncRuntime(std::move(rr));
    return OkStatus();
  }

  AgentOptions o_;
  std::mutex mu_;
  std::unique_ptr<Runtime> runtime_;
  std::unique_ptr<Attester> attester_;  // sealed only; outlives pods_ (their before_start)
  std::unique_ptr<ImageStore> images_;
  std::unique_ptr<PodNetwork> network_;                  // outlives pods_ (declared before it)
  std::unique_ptr<ContainerRuntime> containers_;         // outlives pods_ (declared before it)
  std::unique_ptr<policy::SignatureSource> signatures_;  // sealed: the workload policy's reads
  std::unique_ptr<PodManager> pods_;
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace

Result<std::unique_ptr<Agent>> Agent::Start(AgentOptions options) {
  auto agent = std::make_unique<AgentImpl>(std::move(options));
  HS_RETURN_IF_ERROR(agent->Init());
  return std::unique_ptr<Agent>(std::move(agent));
}

std::shared_ptr<grpc::Channel> DialAgent(const std::string& address,
                                         const std::string& runners_ca_pem,
                                         const net::pki::KeyPair& client) {
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = runners_ca_pem;
  ssl.pem_cert_chain = client.cert_pem;
  ssl.pem_private_key = client.key_pem;
  return grpc::CreateChannel(address, grpc::SslCredentials(ssl));
}

}  // namespace hyperslice::runners::agent
