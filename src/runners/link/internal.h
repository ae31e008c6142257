// Shared between the link server and its tests; not part of the module's surface.
#pragma once

#include <chrono>
#include <string>

#include "src/base/result.h"
#include "src/net/pki.h"

namespace hyperslice::runners::link {

// Signs a runner agent's CSR: CN = runner, O = kRunnerOrganization, SAN = host of agent_address.
Result<std::string> SignRunnerCsr(const net::pki::KeyPair& ca, const std::string& runner,
                                  const std::string& csr_pem, const std::string& agent_address,
                                  std::chrono::seconds validity);

}  // namespace hyperslice::runners::link
