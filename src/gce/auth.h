// OAuth2 access tokens for Compute Engine, by Application Default Credentials:
//   1. GOOGLE_APPLICATION_CREDENTIALS names a JSON key file: a service-account key is exchanged for
//      a token with an RS256-signed JWT (grant type jwt-bearer); an "authorized_user" file (what
//      `gcloud auth application-default login` writes) with its refresh token;
//   2. the gcloud well-known file ~/.config/gcloud/application_default_credentials.json, same
//   forms;
//   3. the metadata server of the VM we run on (GCE_METADATA_HOST overrides its address).
// A static token source serves tests and callers that already hold a token.
//
// Token sources cache the token and fetch a new one `refresh_margin` before it expires (or at half
// its lifetime when that is shorter). Thread-safe. Tokens and keys are never logged and never
// appear in error messages.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "src/base/clock.h"
#include "src/base/result.h"
#include "src/net/http.h"

namespace hyperslice::gce {

inline constexpr char kCloudPlatformScope[] = "https://www.googleapis.com/auth/cloud-platform";
inline constexpr char kDefaultTokenUri[] = "https://oauth2.googleapis.com/token";
inline constexpr char kDefaultMetadataHost[] = "metadata.google.internal";

class TokenSource {
 public:
  virtual ~TokenSource() = default;
  // A bearer token that stays valid for at least the refresh margin; fetches one when needed.
  // Errors: kUnauthorized when the credentials were refused, kUnavailable/kTimeout when the token
  // endpoint could not be reached (retryable).
  virtual Result<std::string> Token() = 0;
  // Forgets the cached token (the API answered 401), so the next Token() fetches a new one.
  virtual void Invalidate() = 0;
  // "static", "metadata", "service-account:<email>", "authorized-user" (for logs; no secrets).
  virtual std::string Describe() const = 0;
};

// The fields of a service-account JSON key that the JWT flow uses.
struct ServiceAccountKey {
  std::string client_email;
  std::string private_key_id;
  std::string private_key;  // PKCS#8 PEM
  std::string token_uri;    // kDefaultTokenUri when the key has none
  std::string project_id;
};
Result<ServiceAccountKey> ParseServiceAccountKey(std::string_view json);

struct TokenSourceOptions {
  std::string token_uri;      // overrides the key file's token_uri (and the JWT's aud)
  std::string metadata_host;  // "host[:port]"; default $GCE_METADATA_HOST or kDefaultMetadataHost
  std::vector<std::string> scopes = {kCloudPlatformScope};
  std::chrono::seconds refresh_margin{300};
  std::chrono::milliseconds request_timeout{10000};
  net::TlsConfig tls;      // for an https token endpoint (default: system roots)
  Clock* clock = nullptr;  // expiry bookkeeping; nullptr = RealClock()
};

std::shared_ptr<TokenSource> StaticTokenSource(std::string token);
Result<std::shared_ptr<TokenSource>> ServiceAccountTokenSource(ServiceAccountKey key,
                                                               const TokenSourceOptions& options);
Result<std::shared_ptr<TokenSource>> MetadataTokenSource(const TokenSourceOptions& options);
// Reads an ADC JSON file (service_account or authorized_user) and builds its token source.
Result<std::shared_ptr<TokenSource>> CredentialsFileTokenSource(const std::string& path,
                                                                const TokenSourceOptions& options);
// Application Default Credentials in the order described at the top of this file.
Result<std::shared_ptr<TokenSource>> DefaultTokenSource(const TokenSourceOptions& options);

}  // namespace hyperslice::gce
