// Serving pairs for servers under test that a client reaches on 127.0.0.1 (the webhook tests, the
// HTTP server's TLS tests): the files <dir>/tls.crt and <dir>/tls.key, which webhook::ServerOptions
// and the HTTP server's TLS files name, and a fresh CA's loopback pair. Header-only.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>

#include "src/base/result.h"
#include "src/net/pki.h"

namespace hyperslice::testenv {

// Writes the pair as <dir>/tls.crt and <dir>/tls.key, each written aside and renamed: a server
// that reloads its pair when the files change never reads half a file.
inline void WriteServingPair(const std::filesystem::path& dir, const std::string& cert_pem,
                             const std::string& key_pem) {
  std::ofstream(dir / "tls.crt.tmp") << cert_pem;
  std::ofstream(dir / "tls.key.tmp") << key_pem;
  std::filesystem::rename(dir / "tls.crt.tmp", dir / "tls.crt");
  std::filesystem::rename(dir / "tls.key.tmp", dir / "tls.key");
}

// A serving certificate for 127.0.0.1 (common name "webhook") that `ca` issues.
inline Result<net::pki::KeyPair> IssueLoopbackServing(const net::pki::KeyPair& ca) {
  net::pki::CertRequest req;
  req.common_name = "webhook";
  req.ip_addresses = {"127.0.0.1"};
  req.server = true;
  return net::pki::Issue(ca, req);
}

// A fresh CA named `ca_name` and the loopback pair it issues, written to `dir`. Returns the CA,
// whose certificate is the caBundle to register.
inline Result<net::pki::KeyPair> WriteLoopbackServingPair(const std::filesystem::path& dir,
                                                          const std::string& ca_name) {
  HS_ASSIGN_OR_RETURN(net::pki::KeyPair ca, net::pki::MakeCa(ca_name));
  HS_ASSIGN_OR_RETURN(net::pki::KeyPair kp, IssueLoopbackServing(ca));
  WriteServingPair(dir, kp.cert_pem, kp.key_pem);
  return ca;
}

}  // namespace hyperslice::testenv
