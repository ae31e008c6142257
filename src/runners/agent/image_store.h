// Images by digest from an OCI distribution / Docker Registry HTTP API v2 registry, verified and
// unpacked into a content-addressed cache under the agent's state dir.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "src/base/result.h"
#include "src/runners/registry/registry.h"

namespace hyperslice::runners::agent {

using registry::ImageRef;
using registry::ParseImageRef;
using registry::RegistryOptions;

// The parts of an image's config a runtime bundle needs.
struct Image {
  std::string manifest_digest;  // what image_id reports
  std::string config_digest;
  std::string rootfs;  // unpacked, read-only lower layer for containers
  std::vector<std::string> entrypoint;
  std::vector<std::string> cmd;
  std::vector<std::string> env;
  std::string working_dir;
  std::string user;
};

// Thread-safe: pulls of one image are serialised; different images pull in parallel.
class ImageStore {
 public:
  ImageStore(std::string dir, RegistryOptions options);
  // Pulls (or finds in the cache) the image. Errors: kInvalidArgument for a bad reference,
  // kFailedPrecondition-like kConflict with reason "DigestMismatch" when a blob or manifest does
  // not hash to its digest, kNotFound, kUnauthorized, kUnavailable for transport failures.
  Result<Image> Pull(const std::string& image);

 private:
  Result<Image> PullLocked(const ImageRef& ref);
  std::mutex& LockFor(const std::string& key);

  std::string dir_;
  RegistryOptions options_;
  std::mutex mu_;
  std::map<std::string, std::unique_ptr<std::mutex>> locks_;
  std::map<std::string, Image> cache_;  // by image string
};

// Applies one layer (tar, gzip-compressed or not) to `rootfs`, honouring OCI whiteouts
// (".wh.<name>" removes <name>, ".wh..wh..opq" empties the directory). Entries that would land
// outside `rootfs` are refused.
Status ApplyLayer(const std::string& layer_path, const std::string& rootfs);

}  // namespace hyperslice::runners::agent
