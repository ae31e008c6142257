#include "src/net/tls.h"

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <boost/asio/ssl.hpp>

namespace hyperslice::net::internal {
namespace ssl = boost::asio::ssl;

namespace {

std::string OpenSslError(const boost::system::error_code& ec) {
  std::string msg = ec.message();
  unsigned long e = ERR_get_error();  // NOLINT(google-runtime-int): OpenSSL's type
  if (e != 0) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    msg += std::string(" (") + buf + ")";
  }
  ERR_clear_error();
  return msg;
}

}  // namespace

Result<std::shared_ptr<ssl::context>> MakeClientContext(const TlsConfig& tls) {
  auto ctx = std::make_shared<ssl::context>(ssl::context::tls_client);
  SSL_CTX_set_min_proto_version(ctx->native_handle(), TLS1_2_VERSION);
  boost::system::error_code ec;
  if (tls.insecure_skip_verify) {
    ctx->set_verify_mode(ssl::verify_none);
  } else {
    ctx->set_verify_mode(ssl::verify_peer);
    if (!tls.ca_pem.empty()) {
      ctx->add_certificate_authority(boost::asio::buffer(tls.ca_pem), ec);
      if (ec) {
        return Error::Make(Error::Code::kInvalidArgument,
                           "invalid certificate authority PEM: " + OpenSslError(ec));
      }
    } else {
      ctx->set_default_verify_paths(ec);
    }
  }
  if (!tls.client_cert_pem.empty() || !tls.client_key_pem.empty()) {
    if (tls.client_cert_pem.empty() || tls.client_key_pem.empty()) {
      return Error::Make(Error::Code::kInvalidArgument,
                         "client certificate and key must be given together");
    }
    ctx->use_certificate_chain(boost::asio::buffer(tls.client_cert_pem), ec);
    if (ec) {
      return Error::Make(Error::Code::kInvalidArgument,
                         "invalid client certificate PEM: " + OpenSslError(ec));
    }
    ctx->use_private_key(boost::asio::buffer(tls.client_key_pem), ssl::context::pem, ec);
    if (ec) {
      return Error::Make(Error::Code::kInvalidArgument,
                         "invalid client key PEM: " + OpenSslError(ec));
    }
    if (SSL_CTX_check_private_key(ctx->native_handle()) != 1) {
      ERR_clear_error();
      return Error::Make(Error::Code::kInvalidArgument,
                         "client key does not match the client certificate");
    }
  }
  return ctx;
}

Result<std::shared_ptr<ssl::context>> MakeServerContext(const std::string& cert_file,
                                                        const std::string& key_file) {
  auto ctx = std::make_shared<ssl::context>(ssl::context::tls_server);
  SSL_CTX_set_min_proto_version(ctx->native_handle(), TLS1_2_VERSION);
  ctx->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                   ssl::context::no_sslv3 | ssl::context::single_dh_use);
  boost::system::error_code ec;
  ctx->use_certificate_chain_file(cert_file, ec);
  if (ec) {
    return Error::Make(Error::Code::kInvalidArgument,
                       "cannot load TLS certificate " + cert_file + ": " + OpenSslError(ec));
  }
  ctx->use_private_key_file(key_file, ssl::context::pem, ec);
  if (ec) {
    return Error::Make(Error::Code::kInvalidArgument, "cannot load TLS key " + key_file +
                                                          " (or it does not match certificate " +
                                                          cert_file + "): " + OpenSslError(ec));
  }
  if (SSL_CTX_check_private_key(ctx->native_handle()) != 1) {
    ERR_clear_error();
    return Error::Make(Error::Code::kInvalidArgument,
                       "TLS key " + key_file + " does not match certificate " + cert_file);
  }
  return ctx;
}

}  // namespace hyperslice::net::internal
