// cosign signatures as cosign stores them: an OCI manifest tagged sha256-<hex>.sig in the image's
// own repository, one simple-signing layer per signature.
#include <boost/json.hpp>

#include "src/runners/policy/policy.h"

namespace hyperslice::runners::policy {
namespace json = boost::json;
namespace {

constexpr char kAccept[] =
    "application/vnd.oci.image.manifest.v1+json, "
    "application/vnd.docker.distribution.manifest.v2+json";

class RegistrySignatureSource : public SignatureSource {
 public:
  explicit RegistrySignatureSource(registry::RegistryOptions options)
      : options_(std::move(options)) {}

  Result<std::vector<attest::CosignSignature>> Signatures(
      const registry::ImageRef& image) override {
    HS_ASSIGN_OR_RETURN(std::string tag, attest::CosignSignatureTag(image.digest));
    // One conversation per call: its Bearer token is for this repository only.
    registry::Client client(image, options_);
    const std::string base = "/v2/" + image.repository;
    auto manifest = client.Get(base + "/manifests/" + tag, kAccept);
    if (!manifest.ok() && manifest.error().code == Error::Code::kNotFound) {
      return std::vector<attest::CosignSignature>{};
    }
    if (!manifest.ok()) return manifest.error();
    boost::system::error_code ec;
    json::value v = json::parse(manifest->body, ec);
    if (ec || !v.is_object()) {
      return Error::Make(Error::Code::kInvalidArgument,
                         "signature manifest " + tag + " is not JSON", "SignatureManifest");
    }
    std::map<std::string, std::string> blobs;
    if (const auto* layers = v.as_object().if_contains("layers"); layers && layers->is_array()) {
      for (const auto& l : layers->as_array()) {
        const auto* d = l.is_object() ? l.as_object().if_contains("digest") : nullptr;
        const auto* mt = l.is_object() ? l.as_object().if_contains("mediaType") : nullptr;
        if (d == nullptr || !d->is_string() || mt == nullptr || !mt->is_string() ||
            mt->as_string() != attest::kSimpleSigningMediaType) {
          continue;  // only simple-signing layers are read (ExtractCosignSignatures keeps those)
        }
        std::string digest(d->as_string());
        if (!registry::ValidDigest(digest) || blobs.count(digest)) continue;
        HS_ASSIGN_OR_RETURN(auto blob, client.Get(base + "/blobs/" + digest, ""));
        blobs[digest] = std::move(blob.body);
      }
    }
    return attest::ExtractCosignSignatures(manifest->body, blobs);
  }

 private:
  registry::RegistryOptions options_;
};

}  // namespace

std::unique_ptr<SignatureSource> NewRegistrySignatureSource(registry::RegistryOptions options) {
  return std::make_unique<RegistrySignatureSource>(std::move(options));
}

}  // namespace hyperslice::runners::policy
