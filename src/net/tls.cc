#include "src/net/tls.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

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

Result<CaStore> LoadCaStore(const std::string& pem) {
  CaStore store(X509_STORE_new(), X509_STORE_free);
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(
      BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())), BIO_free);
  if (!store || !bio) return Error::Make(Error::Code::kInternal, "out of memory");
  int n = 0;
  while (X509* cert = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
    X509_STORE_add_cert(store.get(), cert);
    X509_free(cert);
    ++n;
  }
  ERR_clear_error();
  if (n == 0)
    return Error::Make(Error::Code::kInvalidArgument, "client CA: no PEM certificate found");
  return store;
}

void RequestClientCertificate(SSL_CTX* ctx) {
  // A verify callback that accepts everything: a missing or bad certificate is the request's
  // answer (401), not a TLS alert the client cannot read.
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, [](int, X509_STORE_CTX*) { return 1; });
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
  SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET);
  static const unsigned char kSessionContext[] = "hyperslice-mtls";
  SSL_CTX_set_session_id_context(ctx, kSessionContext, sizeof kSessionContext - 1);
}

namespace {

std::vector<std::string> NameEntries(X509_NAME* name, int nid) {
  std::vector<std::string> out;
  int i = -1;
  while ((i = X509_NAME_get_index_by_NID(name, nid, i)) >= 0) {
    ASN1_STRING* data = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(name, i));
    unsigned char* utf8 = nullptr;
    int len = ASN1_STRING_to_UTF8(&utf8, data);
    if (len >= 0) out.emplace_back(reinterpret_cast<char*>(utf8), static_cast<size_t>(len));
    OPENSSL_free(utf8);
  }
  return out;
}

}  // namespace

std::optional<ClientIdentity> VerifyClient(SSL* ssl, X509_STORE* store) {
  std::unique_ptr<X509, decltype(&X509_free)> leaf(SSL_get1_peer_certificate(ssl), X509_free);
  if (!leaf) return std::nullopt;
  std::unique_ptr<X509_STORE_CTX, decltype(&X509_STORE_CTX_free)> ctx(X509_STORE_CTX_new(),
                                                                      X509_STORE_CTX_free);
  if (!ctx ||
      X509_STORE_CTX_init(ctx.get(), store, leaf.get(), SSL_get_peer_cert_chain(ssl)) != 1) {
    return std::nullopt;
  }
  X509_STORE_CTX_set_purpose(ctx.get(), X509_PURPOSE_SSL_CLIENT);
  bool ok = X509_verify_cert(ctx.get()) == 1;
  ERR_clear_error();
  if (!ok) return std::nullopt;
  X509_NAME* subject = X509_get_subject_name(leaf.get());
  auto cn = NameEntries(subject, NID_commonName);
  if (cn.empty() || cn.front().empty()) return std::nullopt;
  ClientIdentity id;
  id.name = cn.front();
  id.groups = NameEntries(subject, NID_organizationName);
  return id;
}

}  // namespace hyperslice::net::internal
