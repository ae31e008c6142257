// Building OpenSSL contexts from PEM strings (internal to src/net).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include <boost/asio/ssl/context.hpp>

#include "src/base/result.h"
#include "src/net/http.h"
#include "src/net/server.h"

namespace hyperslice::net::internal {

// Client context: TLS 1.2+, peer verification against `tls.ca_pem` (or system roots), optional
// client certificate.
Result<std::shared_ptr<boost::asio::ssl::context>> MakeClientContext(const TlsConfig& tls);
// Server context from PEM files: TLS 1.2+, no client certificate requested.
Result<std::shared_ptr<boost::asio::ssl::context>> MakeServerContext(const std::string& cert_file,
                                                                     const std::string& key_file);

// Client certificates on a server (HttpServer::Options::client_ca_pem).
using CaStore = std::shared_ptr<X509_STORE>;
// The certificates of a PEM bundle as a verification store; an error when it holds none.
Result<CaStore> LoadCaStore(const std::string& pem);
// Asks for a client certificate but lets the handshake finish without one (or with one that does
// not verify): the caller verifies after the handshake (VerifyClient) and answers the request.
// Turns session resumption off, so that every connection presents its certificate.
void RequestClientCertificate(SSL_CTX* ctx);
// The identity the peer's certificate names when it verifies against `store` for client
// authentication and has a CN; nullopt otherwise (no certificate, wrong CA, expired, ...).
std::optional<ClientIdentity> VerifyClient(SSL* ssl, X509_STORE* store);

}  // namespace hyperslice::net::internal
