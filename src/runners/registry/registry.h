// Reading from an OCI distribution / Docker Registry HTTP API v2 registry: image references and
// one registry conversation (anonymous or Bearer per WWW-Authenticate, redirects). The runner
// agent pulls images through it; the workload policy reads cosign signatures through it.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "src/base/result.h"
#include "src/net/http.h"

namespace hyperslice::runners::registry {

// registry/repository[:tag][@sha256:<hex>]. The registry host is required (no implicit default
// registry): a runner pulls only from where the pod says.
struct ImageRef {
  std::string registry;    // host[:port]
  std::string repository;  // path
  std::string tag;
  std::string digest;  // "sha256:<64 hex>" or ""
  std::string Reference() const { return digest.empty() ? tag : digest; }
};
// kInvalidArgument, reason "InvalidImageName", naming what is wrong.
Result<ImageRef> ParseImageRef(const std::string& image);
// "sha256:<64 lowercase hex>".
bool ValidDigest(const std::string& digest);

struct RegistryOptions {
  std::vector<std::string> insecure_registries;  // host:port spoken over plain HTTP
  std::string ca_pem;                            // extra trust for HTTPS registries
  std::chrono::milliseconds timeout{120000};
  std::string user_agent = "hyperslice";  // how this client names itself in registries' logs
};

// One conversation with the registry of `ref`: an HTTP client per origin (blob redirects may go
// elsewhere) and the Bearer token the registry's challenge asked for. Not thread-safe.
class Client {
 public:
  Client(const ImageRef& ref, const RegistryOptions& options);
  // GET `path` ("/v2/<repo>/manifests/<ref>") with `accept` ("" for none). Errors: kNotFound (404,
  // reason "NotFound"), kUnauthorized (401/403), kUnavailable (transport, other statuses).
  Result<net::Response> Get(const std::string& path, const std::string& accept);

 private:
  Result<std::shared_ptr<net::HttpClient>> HttpFor(const std::string& origin);
  Result<net::Response> GetOnce(const std::string& origin, const std::string& target,
                                const std::string& accept, bool auth = true);
  Status Authenticate(const std::string& challenge);

  ImageRef ref_;
  const RegistryOptions& options_;
  std::string origin_;
  std::string token_;
  std::map<std::string, std::shared_ptr<net::HttpClient>> clients_;
};

}  // namespace hyperslice::runners::registry
