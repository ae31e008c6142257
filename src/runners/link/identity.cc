// The runners CA and the identities it issues (see link.h for their shape).
#include <arpa/inet.h>

#include <algorithm>

#include "src/runners/link/internal.h"
#include "src/runners/link/link.h"

namespace hyperslice::runners::link {
namespace {

bool IsIpAddress(const std::string& host) {
  unsigned char buf[16];
  return inet_pton(AF_INET, host.c_str(), buf) == 1 || inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

}  // namespace

Result<net::pki::KeyPair> MakeRunnersCa(std::chrono::seconds validity) {
  return net::pki::MakeCa("hyperslice runners CA", validity);
}

Result<net::pki::KeyPair> IssueControlNodeClientCert(const net::pki::KeyPair& ca,
                                                     const std::string& control_node,
                                                     std::chrono::seconds validity) {
  if (control_node.empty()) {
    return Error::Make(Error::Code::kInvalidArgument, "control node name is empty");
  }
  net::pki::CertRequest req;
  req.common_name = control_node;
  req.organizations = {kControlNodeOrganization};
  req.client = true;
  req.validity = validity;
  return net::pki::Issue(ca, req);
}

Result<net::pki::KeyPair> IssueLinkServerCert(const net::pki::KeyPair& ca, const std::string& host,
                                              std::chrono::seconds validity) {
  net::pki::CertRequest req;
  req.common_name = "hyperslice runner link";
  if (IsIpAddress(host)) {
    req.ip_addresses = {host};
  } else {
    req.dns_names = {host};
  }
  req.server = true;
  req.validity = validity;
  return net::pki::Issue(ca, req);
}

bool IsControlNodeIdentity(const std::string& cert_pem) {
  auto info = net::pki::Inspect(cert_pem);
  if (!info.ok()) return false;
  const auto& orgs = info->organizations;
  return std::find(orgs.begin(), orgs.end(), kControlNodeOrganization) != orgs.end();
}

Result<std::string> HostOf(const std::string& address) {
  std::string host;
  if (!address.empty() && address.front() == '[') {
    auto close = address.find(']');
    if (close == std::string::npos) {
      return Error::Make(Error::Code::kInvalidArgument, "bad address " + address);
    }
    host = address.substr(1, close - 1);
  } else {
    auto colon = address.rfind(':');
    if (colon == std::string::npos) {
      return Error::Make(Error::Code::kInvalidArgument, "address " + address + " is not host:port");
    }
    host = address.substr(0, colon);
  }
  if (host.empty()) return Error::Make(Error::Code::kInvalidArgument, "address without a host");
  return host;
}

// Server-side signing of an agent's CSR; used by Link and Renew.
Result<std::string> SignRunnerCsr(const net::pki::KeyPair& ca, const std::string& runner,
                                  const std::string& csr_pem, const std::string& agent_address,
                                  std::chrono::seconds validity) {
  HS_ASSIGN_OR_RETURN(std::string host, HostOf(agent_address));
  net::pki::CertRequest req;
  req.common_name = runner;
  req.organizations = {kRunnerOrganization};
  if (IsIpAddress(host)) {
    req.ip_addresses = {host};
  } else {
    req.dns_names = {host};
  }
  // The Runner's name as well (a DNS-1123 name): control nodes verify an agent by the Runner it
  // must be, whatever address it answers on.
  if (host != runner) req.dns_names.push_back(runner);
  req.server = true;
  req.client = true;
  req.validity = validity;
  return net::pki::SignCsr(ca, csr_pem, req);
}

void MemoryJoinTokenStore::Add(const std::string& runner, const std::string& token,
                               std::chrono::system_clock::time_point expires) {
  std::lock_guard lock(mu_);
  tokens_[token] = Entry{runner, expires, false};
}

Status MemoryJoinTokenStore::Consume(const std::string& runner, const std::string& token) {
  std::lock_guard lock(mu_);
  auto refuse = [](const std::string& why) {
    return Error::Make(Error::Code::kForbidden, "join token refused: " + why,
                       kReasonJoinTokenRefused);
  };
  auto it = tokens_.find(token);
  if (it == tokens_.end()) return refuse("unknown token");
  if (it->second.used) return refuse("token already used");
  if (it->second.runner != runner) return refuse("token was issued for another runner");
  if (std::chrono::system_clock::now() >= it->second.expires) return refuse("token expired");
  it->second.used = true;
  return OkStatus();
}

}  // namespace hyperslice::runners::link
