// The RunnerLink gRPC server (link.h).
#include <grpcpp/grpcpp.h>

#include <algorithm>

#include "src/base/log.h"
#include "src/runners/agent.grpc.pb.h"
#include "src/runners/link/internal.h"
#include "src/runners/link/link.h"

namespace hyperslice::runners::link {
namespace {

namespace v1 = ::hyperslice::runners::v1;

grpc::Status ToGrpc(const Error& e) {
  grpc::StatusCode code = grpc::StatusCode::UNKNOWN;
  switch (e.code) {
    case Error::Code::kInvalidArgument:
      code = grpc::StatusCode::INVALID_ARGUMENT;
      break;
    case Error::Code::kForbidden:
      code = grpc::StatusCode::PERMISSION_DENIED;
      break;
    case Error::Code::kUnauthorized:
      code = grpc::StatusCode::UNAUTHENTICATED;
      break;
    case Error::Code::kUnavailable:
      code = grpc::StatusCode::UNAVAILABLE;
      break;
    default:
      code = grpc::StatusCode::INTERNAL;
      break;
  }
  std::string msg = e.reason.empty() ? e.message : e.reason + ": " + e.message;
  return {code, msg};
}

class LinkService final : public v1::RunnerLink::Service {
 public:
  explicit LinkService(const LinkServer::Options& options) : options_(options) {}

  grpc::Status Link(grpc::ServerContext* /*ctx*/, const v1::LinkRequest* req,
                    v1::LinkResponse* resp) override {
    if (req->runner_name().empty() || req->csr_pem().empty() || req->agent_address().empty()) {
      return {grpc::StatusCode::INVALID_ARGUMENT,
              "runner_name, csr_pem and agent_address are required"};
    }
    if (Status st = options_.tokens->Consume(req->runner_name(), req->join_token()); !st.ok()) {
      log::Warn("runner link refused",
                {{"runner", req->runner_name()}, {"reason", st.error().message}});
      return ToGrpc(st.error());
    }
    return Answer(req->runner_name(), req->csr_pem(), req->agent_address(), false, resp);
  }

  grpc::Status Renew(grpc::ServerContext* ctx, const v1::RenewRequest* req,
                     v1::LinkResponse* resp) override {
    std::string runner;
    if (grpc::Status st = SessionRunner(ctx, &runner); !st.ok()) return st;
    if (req->csr_pem().empty() || req->agent_address().empty()) {
      return {grpc::StatusCode::INVALID_ARGUMENT, "csr_pem and agent_address are required"};
    }
    return Answer(runner, req->csr_pem(), req->agent_address(), true, resp);
  }

  grpc::Status AttestationToken(grpc::ServerContext* ctx, const v1::AttestationTokenRequest* req,
                                v1::AttestationTokenResponse* resp) override {
    if (!options_.attestation_tokens) {
      return {grpc::StatusCode::UNIMPLEMENTED, "this link server issues no attestation tokens"};
    }
    AttestationTokenRequest r;
    if (grpc::Status st = SessionRunner(ctx, &r.runner); !st.ok()) return st;
    if (req->pod_uid().empty() || req->container().empty() || req->audience().empty()) {
      return {grpc::StatusCode::INVALID_ARGUMENT, "pod_uid, container and audience are required"};
    }
    r.pod_uid = req->pod_uid();
    r.container = req->container();
    r.audience = req->audience();
    r.nonces.assign(req->nonces().begin(), req->nonces().end());
    r.tee_pubkey_sha256 = req->tee_pubkey_sha256();
    auto token = options_.attestation_tokens(r);
    if (!token.ok()) {
      log::Warn("attestation token refused",
                {{"runner", r.runner}, {"pod_uid", r.pod_uid}, {"reason", token.error().message}});
      return ToGrpc(token.error());
    }
    resp->set_token(*token);
    return grpc::Status::OK;
  }

 private:
  // The runner named by the session's client certificate. gRPC verified the chain and validity
  // of a presented certificate; absence and the organisation are checked here.
  static grpc::Status SessionRunner(grpc::ServerContext* ctx, std::string* runner) {
    auto certs = ctx->auth_context()->FindPropertyValues("x509_pem_cert");
    if (certs.empty()) {
      return {grpc::StatusCode::UNAUTHENTICATED,
              std::string(kReasonIdentityRefused) + ": this call needs the runner's certificate"};
    }
    std::string pem(certs.front().data(), certs.front().size());
    auto info = net::pki::Inspect(pem);
    if (!info.ok() || std::find(info->organizations.begin(), info->organizations.end(),
                                kRunnerOrganization) == info->organizations.end()) {
      return {grpc::StatusCode::PERMISSION_DENIED,
              std::string(kReasonIdentityRefused) + ": not a runner identity"};
    }
    *runner = info->common_name;
    return grpc::Status::OK;
  }

  grpc::Status Answer(const std::string& runner, const std::string& csr, const std::string& address,
                      bool renewal, v1::LinkResponse* resp) {
    auto cert = SignRunnerCsr(options_.ca, runner, csr, address, options_.validity);
    if (!cert.ok()) return ToGrpc(cert.error());
    auto info = net::pki::Inspect(*cert);
    if (!info.ok()) return ToGrpc(info.error());
    resp->set_certificate_pem(*cert);
    resp->set_ca_bundle_pem(options_.ca.cert_pem);
    resp->set_not_after_unix(
        std::chrono::duration_cast<std::chrono::seconds>(info->not_after.time_since_epoch())
            .count());
    log::Info(renewal ? "runner identity renewed" : "runner linked",
              {{"runner", runner}, {"address", address}});
    if (options_.on_linked) {
      options_.on_linked(LinkedRunner{runner, address, *cert, info->not_after, renewal});
    }
    return grpc::Status::OK;
  }

  const LinkServer::Options& options_;
};

class LinkServerImpl final : public LinkServer {
 public:
  explicit LinkServerImpl(Options options) : options_(std::move(options)), service_(options_) {}
  ~LinkServerImpl() override { Stop(); }

  Status Start() {
    grpc::SslServerCredentialsOptions ssl(GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY);
    ssl.pem_root_certs = options_.ca.cert_pem;
    ssl.pem_key_cert_pairs.push_back({options_.serving.key_pem, options_.serving.cert_pem});
    grpc::ServerBuilder builder;
    builder.AddListeningPort(options_.listen, grpc::SslServerCredentials(ssl), &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    if (!server_ || port_ == 0) {
      return Error::Make(Error::Code::kUnavailable, "cannot listen on " + options_.listen);
    }
    return OkStatus();
  }
  int port() const override { return port_; }
  void Stop() override {
    if (server_) {
      server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
      server_->Wait();
      server_.reset();
    }
  }

 private:
  Options options_;
  LinkService service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace

Result<std::unique_ptr<LinkServer>> LinkServer::Start(Options options) {
  if (options.tokens == nullptr) {
    return Error::Make(Error::Code::kInvalidArgument, "link server needs a join token store");
  }
  auto server = std::make_unique<LinkServerImpl>(std::move(options));
  HS_RETURN_IF_ERROR(server->Start());
  return std::unique_ptr<LinkServer>(std::move(server));
}

}  // namespace hyperslice::runners::link
