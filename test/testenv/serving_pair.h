// A serving certificate for an in-process server the apiserver calls on 127.0.0.1 (the webhook
// tests): a fresh CA, and a pair it signs written as <dir>/tls.crt and <dir>/tls.key, the files
// webhook::ServerOptions reads. Returns the CA, whose certificate is the caBundle to register.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>

#include "src/base/result.h"
#include "src/net/pki.h"

namespace hyperslice::testenv {

inline Result<net::pki::KeyPair> WriteLoopbackServingPair(const std::filesystem::path& dir,
                                                          const std::string& ca_name) {
  HS_ASSIGN_OR_RETURN(net::pki::KeyPair ca, net::pki::MakeCa(ca_name));
  net::pki::CertRequest req;
  req.common_name = "webhook";
  req.ip_addresses = {"127.0.0.1"};
  req.server = true;
  HS_ASSIGN_OR_RETURN(net::pki::KeyPair kp, net::pki::Issue(ca, req));
  std::ofstream(dir / "tls.crt") << kp.cert_pem;
  std::ofstream(dir / "tls.key") << kp.key_pem;
  return ca;
}

}  // namespace hyperslice::testenv
