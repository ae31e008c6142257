// The agent's side of RunnerLink: key and CSR made here, identity persisted 0600 (link.h).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <grpcpp/grpcpp.h>

#include <cerrno>
#include <cstring>

#include "src/base/files.h"
#include "src/runners/agent.grpc.pb.h"
#include "src/runners/link/link.h"

namespace hyperslice::runners::link {
namespace {

namespace v1 = ::hyperslice::runners::v1;

std::string Dir(const std::string& state_dir) { return state_dir + "/identity"; }

// Written to a temporary name and renamed, so a crash never leaves half a key; created 0600.
Status WritePrivate(const std::string& path, const std::string& data) {
  std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    return Error::Make(Error::Code::kInternal, "cannot write " + tmp + ": " + std::strerror(errno));
  }
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::write(fd, data.data() + off, data.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      ::close(fd);
      return Error::Make(Error::Code::kInternal, "cannot write " + tmp);
    }
    off += static_cast<size_t>(n);
  }
  ::fchmod(fd, 0600);
  ::fsync(fd);
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    return Error::Make(Error::Code::kInternal, "cannot rename " + tmp);
  }
  return OkStatus();
}

Status Save(const std::string& state_dir, const AgentIdentity& id) {
  ::mkdir(state_dir.c_str(), 0700);
  std::string dir = Dir(state_dir);
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return Error::Make(Error::Code::kInternal, "cannot create " + dir);
  }
  ::chmod(dir.c_str(), 0700);
  // Key first: a crash between the two leaves a key without its certificate (Load refuses it
  // and the agent links again) rather than a certificate for a key that is gone.
  HS_RETURN_IF_ERROR(WritePrivate(dir + "/key.pem", id.key_pem));
  HS_RETURN_IF_ERROR(WritePrivate(dir + "/ca.pem", id.ca_pem));
  HS_RETURN_IF_ERROR(WritePrivate(dir + "/obtained",
                                  std::to_string(std::chrono::duration_cast<std::chrono::seconds>(
                                                     id.obtained.time_since_epoch())
                                                     .count())));
  return WritePrivate(dir + "/cert.pem", id.cert_pem);
}

Result<AgentIdentity> FromResponse(const v1::LinkResponse& resp, std::string key_pem) {
  AgentIdentity id;
  id.cert_pem = resp.certificate_pem();
  id.key_pem = std::move(key_pem);
  id.ca_pem = resp.ca_bundle_pem();
  id.obtained = std::chrono::system_clock::now();
  HS_ASSIGN_OR_RETURN(auto info, net::pki::Inspect(id.cert_pem));
  id.not_after = info.not_after;
  return id;
}

std::unique_ptr<v1::RunnerLink::Stub> Stub(const LinkClientOptions& o, const std::string& cert,
                                           const std::string& key) {
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = o.link_ca_pem;
  ssl.pem_cert_chain = cert;
  ssl.pem_private_key = key;
  return v1::RunnerLink::NewStub(grpc::CreateChannel(o.endpoint, grpc::SslCredentials(ssl)));
}

}  // namespace

Result<AgentIdentity> LoadIdentity(const std::string& state_dir) {
  AgentIdentity id;
  HS_ASSIGN_OR_RETURN(id.cert_pem, ReadFile(Dir(state_dir) + "/cert.pem"));
  HS_ASSIGN_OR_RETURN(id.key_pem, ReadFile(Dir(state_dir) + "/key.pem"));
  HS_ASSIGN_OR_RETURN(id.ca_pem, ReadFile(Dir(state_dir) + "/ca.pem"));
  HS_ASSIGN_OR_RETURN(std::string obtained, ReadFile(Dir(state_dir) + "/obtained"));
  HS_ASSIGN_OR_RETURN(auto info, net::pki::Inspect(id.cert_pem));
  id.not_after = info.not_after;
  id.obtained = std::chrono::system_clock::time_point(
      std::chrono::seconds(std::strtoll(obtained.c_str(), nullptr, 10)));
  return id;
}

Result<AgentIdentity> Link(const LinkClientOptions& options, const std::string& join_token) {
  HS_ASSIGN_OR_RETURN(auto csr, net::pki::MakeCsr(options.runner_name));
  v1::LinkRequest req;
  req.set_runner_name(options.runner_name);
  req.set_join_token(join_token);
  req.set_csr_pem(csr.csr_pem);
  req.set_agent_address(options.agent_address);
  v1::LinkResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + options.timeout);
  grpc::Status st = Stub(options, "", "")->Link(&ctx, req, &resp);
  if (!st.ok()) return FromGrpc(st, "link " + options.runner_name);
  HS_ASSIGN_OR_RETURN(auto id, FromResponse(resp, std::move(csr.key_pem)));
  HS_RETURN_IF_ERROR(Save(options.state_dir, id));
  return id;
}

Result<AgentIdentity> Renew(const LinkClientOptions& options, const AgentIdentity& current) {
  HS_ASSIGN_OR_RETURN(auto csr, net::pki::MakeCsr(options.runner_name));
  v1::RenewRequest req;
  req.set_csr_pem(csr.csr_pem);
  req.set_agent_address(options.agent_address);
  v1::LinkResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + options.timeout);
  grpc::Status st = Stub(options, current.cert_pem, current.key_pem)->Renew(&ctx, req, &resp);
  if (!st.ok()) return FromGrpc(st, "renew " + options.runner_name);
  HS_ASSIGN_OR_RETURN(auto id, FromResponse(resp, std::move(csr.key_pem)));
  HS_RETURN_IF_ERROR(Save(options.state_dir, id));
  return id;
}

Result<std::string> RequestAttestationToken(const LinkClientOptions& options,
                                            const AgentIdentity& current,
                                            const AttestationTokenRequest& request) {
  v1::AttestationTokenRequest req;
  req.set_pod_uid(request.pod_uid);
  req.set_container(request.container);
  req.set_audience(request.audience);
  for (const auto& n : request.nonces) req.add_nonces(n);
  req.set_tee_pubkey_sha256(request.tee_pubkey_sha256);
  v1::AttestationTokenResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + options.timeout);
  grpc::Status st =
      Stub(options, current.cert_pem, current.key_pem)->AttestationToken(&ctx, req, &resp);
  if (!st.ok()) return FromGrpc(st, "attestation token for " + options.runner_name);
  return resp.token();
}

std::chrono::system_clock::time_point RenewalTime(const AgentIdentity& identity) {
  return identity.obtained + (identity.not_after - identity.obtained) * 2 / 3;
}

}  // namespace hyperslice::runners::link
