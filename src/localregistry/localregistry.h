// A local OCI registry for the runner tests (issue 20) and `hyperslice dev --example runners`:
// Debian's `docker-registry` on 127.0.0.1 with a temporary config and storage, and test images
// built from a tiny static program (images/hstest.c) with umoci and pushed with skopeo, referenced
// by digest.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "src/base/result.h"

namespace hyperslice::localregistry {

// Why runner agents and this registry cannot run here ("" when they can): they need root and
// runc, umoci, skopeo, docker-registry, a C compiler and iproute2.
std::string RunnerToolsMissing();

// Thread-safety: one thread at a time.
class Registry {
 public:
  // Starts the registry on a free loopback port (it cannot bind port 0 and report it) and waits
  // until it answers /v2/. Its config, storage and log are in a new folder under `parent_dir`,
  // removed with the registry.
  static Result<std::unique_ptr<Registry>> Start(const std::string& parent_dir = "/tmp");
  ~Registry();
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  std::string host() const { return "127.0.0.1:" + std::to_string(port_); }
  // Builds hstest.c into an image (entrypoint /hstest, cmd print:default, env
  // GREETING=hello, plus a file /marker holding `marker`), pushes it as repo:tag and returns
  // "<host>/<repo>@sha256:<digest>".
  Result<std::string> PushTestImage(const std::string& repo, const std::string& tag = "v1",
                                    const std::string& marker = "hstest");
  // An image whose entrypoint is the static executable `program` (copied to /<its file name>),
  // without cmd or env; pushed as repo:tag, returned as PushTestImage's.
  Result<std::string> PushProgramImage(const std::string& repo, const std::string& tag,
                                       const std::string& program);
  // Stores a cosign signature of `image_ref` (repo@sha256:…) as cosign does: the simple-signing
  // `payload` as a layer (annotation dev.cosignproject.cosign/signature = `signature_b64`) of an
  // OCI manifest tagged sha256-<hex>.sig in the image's repository. Signatures already there are
  // replaced (one per call, as tests need).
  Status PushCosignSignature(const std::string& image_ref, const std::string& payload,
                             const std::string& signature_b64);
  // The registry's storage path of a blob (to corrupt it in tests).
  std::string BlobDataPath(const std::string& digest) const;
  // The layer digests of a pushed image reference.
  Result<std::vector<std::string>> LayerDigests(const std::string& image_ref) const;

 private:
  Registry() = default;
  // Builds (umoci) and pushes (skopeo) an image of `bin` with umoci config flags `config`.
  Result<std::string> PushImage(const std::string& repo, const std::string& tag,
                                const std::string& bin, const std::vector<std::string>& config,
                                const std::string& marker);
  std::string dir_;
  int port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace hyperslice::localregistry
