// Building OpenSSL contexts from PEM strings (internal to src/net).
#pragma once

#include <string>

#include <boost/asio/ssl/context.hpp>

#include "src/base/result.h"
#include "src/net/http.h"

namespace hyperslice::net::internal {

// Client context: TLS 1.2+, peer verification against `tls.ca_pem` (or system roots), optional
// client certificate.
Result<std::shared_ptr<boost::asio::ssl::context>> MakeClientContext(const TlsConfig& tls);
// Server context from PEM files: TLS 1.2+, no client certificate requested.
Result<std::shared_ptr<boost::asio::ssl::context>> MakeServerContext(const std::string& cert_file,
                                                                     const std::string& key_file);

}  // namespace hyperslice::net::internal
