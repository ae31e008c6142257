// A local OCI registry for the runner tests (issue 20): Debian's `docker-registry` on 127.0.0.1
// with a temporary config and storage, and test images built from a tiny static program
// (images/hstest.c) with umoci and pushed with skopeo, referenced by digest.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "src/base/result.h"

namespace hyperslice::testenv {

// Why the runner tests cannot run here ("" when they can): they need root and runc, umoci,
// skopeo, docker-registry, a C compiler and iproute2.
std::string RunnerToolsMissing();

class LocalRegistry {
 public:
  // Starts the registry on a free loopback port (it cannot bind port 0 and report it) and waits
  // until it answers /v2/.
  static Result<std::unique_ptr<LocalRegistry>> Start();
  ~LocalRegistry();
  LocalRegistry(const LocalRegistry&) = delete;
  LocalRegistry& operator=(const LocalRegistry&) = delete;

  std::string host() const { return "127.0.0.1:" + std::to_string(port_); }
  // Builds the test program into an image (entrypoint /hstest, cmd print:default, env
  // GREETING=hello, plus a file /marker holding `marker`), pushes it as repo:tag and returns
  // "<host>/<repo>@sha256:<digest>".
  Result<std::string> PushTestImage(const std::string& repo, const std::string& tag = "v1",
                                    const std::string& marker = "hstest");
  // The registry's storage path of a blob (to corrupt it in tests).
  std::string BlobDataPath(const std::string& digest) const;
  // The layer digests of a pushed image reference.
  Result<std::vector<std::string>> LayerDigests(const std::string& image_ref) const;

 private:
  LocalRegistry() = default;
  std::string dir_;
  int port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace hyperslice::testenv
