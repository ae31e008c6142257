// cosign's signature format: the simple-signing payload (containers/image "atomic container
// signature" as cosign writes it) and the way cosign stores a signature in an OCI registry — a
// manifest tagged sha256-<hex>.sig whose layers are payloads with the signature in an annotation.
#include <boost/json/object.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include "src/base/base64.h"
#include "src/base/json.h"
#include "src/runners/attest/attest.h"
#include "src/runners/attest/internal/wire.h"

namespace hyperslice::runners::attest {
namespace {

constexpr std::string_view kCosignType = "cosign container image signature";

Error Invalid(std::string message) {
  return Error::Make(Error::Code::kInvalidArgument, std::move(message), "SignatureMalformed");
}
Error Refused(std::string reason, std::string message) {
  return Error::Make(Error::Code::kUnauthorized, std::move(message), std::move(reason));
}

bool IsDigest(std::string_view d) {
  if (!d.starts_with("sha256:") || d.size() != 7 + 64) return false;
  for (char c : d.substr(7)) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

}  // namespace

Result<SimpleSigning> ParseSimpleSigning(std::string_view payload) {
  boost::system::error_code ec;
  boost::json::value v = boost::json::parse(payload, ec);
  if (ec || !v.is_object()) return Invalid("the simple-signing payload is not a JSON object");
  const auto& root = v.as_object();
  const auto* critical = jsonfield::ObjectField(root, "critical");
  if (!critical) return Invalid("the simple-signing payload has no \"critical\" object");
  if (jsonfield::StringField(*critical, "type") != kCosignType) {
    return Invalid("critical.type is not \"cosign container image signature\"");
  }
  const auto* identity = jsonfield::ObjectField(*critical, "identity");
  const auto* image = jsonfield::ObjectField(*critical, "image");
  if (!identity || !image) return Invalid("critical.identity or critical.image is missing");
  SimpleSigning out;
  out.docker_reference = std::string(jsonfield::StringField(*identity, "docker-reference"));
  out.docker_manifest_digest =
      std::string(jsonfield::StringField(*image, "docker-manifest-digest"));
  if (!IsDigest(out.docker_manifest_digest)) {
    return Invalid("critical.image.docker-manifest-digest is not \"sha256:<64 hex>\"");
  }
  if (const auto* opt = root.if_contains("optional"); opt && !opt->is_null()) {
    if (!opt->is_object()) return Invalid("\"optional\" is neither null nor an object");
    out.optional_json = boost::json::serialize(*opt);
  }
  return out;
}

std::string MakeSimpleSigning(std::string_view docker_reference, std::string_view digest) {
  // Field order and spelling as Go's encoding/json writes cosign's payload struct.
  boost::json::object identity{{"docker-reference", docker_reference}};
  boost::json::object image{{"docker-manifest-digest", digest}};
  return R"({"critical":{"identity":)" + boost::json::serialize(identity) + R"(,"image":)" +
         boost::json::serialize(image) + R"(,"type":")" + std::string(kCosignType) +
         R"("},"optional":null})";
}

Result<std::string> CosignSignatureTag(std::string_view image_digest) {
  if (!IsDigest(image_digest)) return Invalid("an image digest is \"sha256:<64 hex>\"");
  return "sha256-" + std::string(image_digest.substr(7)) + ".sig";
}

Result<std::vector<CosignSignature>> ExtractCosignSignatures(
    std::string_view manifest_json, const std::map<std::string, std::string>& blobs) {
  boost::system::error_code ec;
  boost::json::value v = boost::json::parse(manifest_json, ec);
  if (ec || !v.is_object()) return Invalid("the signature manifest is not a JSON object");
  const auto* layers = jsonfield::ArrayField(v.as_object(), "layers");
  if (!layers) return Invalid("the signature manifest has no layers");
  std::vector<CosignSignature> out;
  for (const auto& l : *layers) {
    if (!l.is_object()) return Invalid("a signature manifest layer is not an object");
    const auto& layer = l.as_object();
    if (jsonfield::StringField(layer, "mediaType") != kSimpleSigningMediaType) continue;
    std::string digest(jsonfield::StringField(layer, "digest"));
    const auto* annotations = jsonfield::ObjectField(layer, "annotations");
    std::string_view sig =
        annotations ? jsonfield::StringField(*annotations, kCosignSignatureAnnotation) : "";
    if (!IsDigest(digest) || sig.empty()) {
      return Invalid("a simple-signing layer lacks a sha256 digest or the signature annotation");
    }
    auto blob = blobs.find(digest);
    if (blob == blobs.end()) {
      return Error::Make(Error::Code::kNotFound, "the layer blob " + digest + " was not fetched");
    }
    auto size = jsonfield::IntField(layer, "size");
    if ("sha256:" + Hex(Sha256(blob->second)) != digest ||
        (size && static_cast<size_t>(*size) != blob->second.size())) {
      return Refused("BlobDigestMismatch",
                     "the registry served a layer whose bytes do not match its digest " + digest);
    }
    out.push_back(CosignSignature{blob->second, std::string(sig)});
  }
  return out;
}

Result<VerifiedImage> VerifyCosignSignatures(const std::vector<CosignSignature>& signatures,
                                             const std::vector<std::string>& trusted_keys_pem,
                                             std::string_view expected_digest) {
  if (!IsDigest(expected_digest)) {
    return Invalid(
        "the expected image digest is not \"sha256:<64 hex>\" (images by tag are "
        "refused)");
  }
  std::vector<internal::Pkey> keys;
  for (const auto& pem : trusted_keys_pem) {
    HS_ASSIGN_OR_RETURN(auto k, internal::PublicKeyFromPem(pem));
    keys.push_back(std::move(k));
  }
  if (signatures.empty()) return Refused("Unsigned", "the image has no cosign signature");
  std::string other_digest;
  for (const auto& s : signatures) {
    auto raw = Base64Decode(s.signature_b64, "the cosign signature");
    if (!raw.ok()) continue;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (!internal::VerifySignature(keys[i].get(), s.payload, *raw)) continue;
      auto payload = ParseSimpleSigning(s.payload);
      if (!payload.ok()) continue;
      if (payload->docker_manifest_digest != expected_digest) {
        other_digest = payload->docker_manifest_digest;
        continue;
      }
      return VerifiedImage{payload->docker_reference, i};
    }
  }
  if (!other_digest.empty()) {
    return Refused("DigestMismatch", "a trusted key signed " + other_digest + ", not " +
                                         std::string(expected_digest));
  }
  return Refused("UntrustedSignature", "no signature verifies under a trusted key");
}

}  // namespace hyperslice::runners::attest
