// Test certificates built with src/net/pki (fatal on failure: a test cannot go on without them).
#pragma once

#include <cstdlib>
#include <string>

#include "src/net/pki.h"

namespace hyperslice::testcerts {

using Ca = net::pki::KeyPair;
using KeyPair = net::pki::KeyPair;

inline Ca MakeCa(const std::string& cn) {
  auto ca = net::pki::MakeCa(cn);
  if (!ca.ok()) std::abort();
  return *ca;
}

inline KeyPair MakeServerCert(const Ca& ca, const std::string& ip) {
  net::pki::CertRequest req;
  req.common_name = "server";
  req.ip_addresses = {ip};
  req.dns_names = {"localhost"};
  req.server = true;
  auto kp = net::pki::Issue(ca, req);
  if (!kp.ok()) std::abort();
  return *kp;
}

}  // namespace hyperslice::testcerts
