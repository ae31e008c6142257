// Workload policy: parsing the WorkloadPolicy object and the launch-policy checks.
#include "src/runners/policy/policy.h"

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include <algorithm>
#include <memory>

#include "src/base/json.h"

namespace hyperslice::runners::policy {
namespace json = boost::json;
using jsonfield::ArrayField;
using jsonfield::BoolField;
using jsonfield::ObjectField;
using jsonfield::StringField;

namespace {

Error Invalid(const std::string& name, const std::string& message) {
  return Error::Make(Error::Code::kInvalidArgument, "WorkloadPolicy \"" + name + "\": " + message,
                     "InvalidWorkloadPolicy");
}

bool IsPublicKeyPem(const std::string& pem) {
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(
      BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())), &BIO_free);
  EVP_PKEY* key = bio ? PEM_read_bio_PUBKEY(bio.get(), nullptr, nullptr, nullptr) : nullptr;
  EVP_PKEY_free(key);
  return key != nullptr;
}

bool Contains(const std::vector<std::string>& list, const std::string& s) {
  return std::find(list.begin(), list.end(), s) != list.end();
}

Error Forbidden(const WorkloadPolicy& p, const char* reason, const std::string& message) {
  return Error::Make(Error::Code::kForbidden, "workload policy " + p.name + ": " + message, reason,
                     403);
}

std::vector<std::string> StringList(const json::object& o, std::string_view key) {
  std::vector<std::string> out;
  if (const json::array* a = ArrayField(o, key)) {
    for (const auto& v : *a) {
      if (v.is_string()) out.emplace_back(v.as_string());
    }
  }
  return out;
}

}  // namespace

Result<WorkloadPolicy> ParseWorkloadPolicy(const json::object& obj) {
  WorkloadPolicy p;
  if (const json::object* meta = ObjectField(obj, "metadata")) p.name = StringField(*meta, "name");
  const json::object* spec = ObjectField(obj, "spec");
  if (spec == nullptr) return Invalid(p.name, "spec is missing");
  if (const json::array* keys = ArrayField(*spec, "trustedKeys")) {
    for (size_t i = 0; i < keys->size(); ++i) {
      std::string field = "spec.trustedKeys[" + std::to_string(i) + "].publicKey";
      const json::value& k = (*keys)[i];
      std::string pem = k.is_object() ? std::string(StringField(k.as_object(), "publicKey")) : "";
      if (!IsPublicKeyPem(pem)) return Invalid(p.name, field + " is not a PEM public key");
      p.trusted_keys_pem.push_back(std::move(pem));
    }
  }
  // Without a key no image can be admitted; say so at once rather than refuse every pod.
  if (p.trusted_keys_pem.empty()) return Invalid(p.name, "spec.trustedKeys is empty");
  p.allow_logs = BoolField(*spec, "allowLogs").value_or(false);
  if (const json::object* lp = ObjectField(*spec, "launchPolicy")) {
    p.allow_command_override = BoolField(*lp, "allowCommandOverride").value_or(false);
    p.allowed_env_overrides = StringList(*lp, "allowedEnvOverrides");
    if (ArrayField(*lp, "allowedMountTypes") != nullptr) {
      p.allowed_mount_types = StringList(*lp, "allowedMountTypes");
      for (const auto& t : *p.allowed_mount_types) {
        if (std::none_of(std::begin(kMountTypes), std::end(kMountTypes),
                         [&t](const char* m) { return t == m; })) {
          return Invalid(p.name, "spec.launchPolicy.allowedMountTypes: unknown type " + t);
        }
      }
    }
  }
  return p;
}

Workload WorkloadFromPod(const json::object& pod) {
  Workload w;
  const json::object* spec = ObjectField(pod, "spec");
  if (spec == nullptr) return w;
  for (const char* list : {"initContainers", "containers"}) {
    const json::array* cs = ArrayField(*spec, list);
    if (cs == nullptr) continue;
    for (const auto& v : *cs) {
      if (!v.is_object()) continue;
      const json::object& c = v.as_object();
      WorkloadContainer wc;
      wc.name = StringField(c, "name");
      wc.image = StringField(c, "image");
      const json::array* cmd = ArrayField(c, "command");
      const json::array* args = ArrayField(c, "args");
      wc.command_override = (cmd && !cmd->empty()) || (args && !args->empty());
      if (const json::array* env = ArrayField(c, "env")) {
        for (const auto& e : *env) {
          if (e.is_object()) wc.env_names.emplace_back(StringField(e.as_object(), "name"));
        }
      }
      const json::array* from = ArrayField(c, "envFrom");
      wc.env_from = from && !from->empty();
      w.containers.push_back(std::move(wc));
    }
  }
  if (const json::array* vols = ArrayField(*spec, "volumes")) {
    for (const auto& v : *vols) {
      if (!v.is_object()) continue;
      // A volume is {name, <type>: {...}}: its type is the key that is not "name".
      std::string type = "unknown";
      for (const auto& [k, _] : v.as_object()) {
        if (k != "name") type = std::string(k);
      }
      w.volume_types.push_back(type);
    }
  }
  return w;
}

Status CheckSpec(const WorkloadPolicy& p, const Workload& w) {
  bool any_env = Contains(p.allowed_env_overrides, "*");
  for (const auto& c : w.containers) {
    if (c.command_override && !p.allow_command_override) {
      return Forbidden(p, kReasonCommandOverride,
                       "container " + c.name +
                           " overrides the image's command or args, which the launch policy "
                           "does not allow");
    }
    if (any_env) continue;
    if (c.env_from) {
      return Forbidden(p, kReasonEnvOverride,
                       "container " + c.name +
                           " uses envFrom; the launch policy allows only named env overrides");
    }
    for (const auto& e : c.env_names) {
      if (!Contains(p.allowed_env_overrides, e)) {
        return Forbidden(p, kReasonEnvOverride,
                         "container " + c.name + " sets env " + e +
                             ", which the launch policy does not allow to override");
      }
    }
  }
  if (p.allowed_mount_types) {
    const auto& allowed = *p.allowed_mount_types;
    const bool any_files = Contains(allowed, "secret") || Contains(allowed, "configMap") ||
                           Contains(allowed, "downwardAPI") || Contains(allowed, "projected");
    for (const auto& t : w.volume_types) {
      if (t == kResolvedFilesVolume && any_files) continue;
      if (!Contains(allowed, t)) {
        return Forbidden(p, kReasonMountType,
                         "volume type " + t + " is not in the launch policy's allowed mounts");
      }
    }
  }
  return OkStatus();
}

Status CheckImages(const WorkloadPolicy& p, const Workload& w, SignatureSource& signatures) {
  for (const auto& c : w.containers) {
    auto ref = registry::ParseImageRef(c.image);
    if (!ref.ok() || ref->digest.empty()) {
      return Forbidden(p, kReasonImageNotByDigest,
                       "container " + c.name + ": image " + c.image +
                           " is not pinned by digest (name@sha256:<digest>)");
    }
    HS_ASSIGN_OR_RETURN(auto sigs, signatures.Signatures(*ref));
    auto verified = attest::VerifyCosignSignatures(sigs, p.trusted_keys_pem, ref->digest);
    if (!verified.ok()) {
      const bool unsigned_image = verified.error().reason == "Unsigned";
      return Forbidden(
          p, unsigned_image ? kReasonImageUnsigned : kReasonImageUntrusted,
          "container " + c.name + ": image " + c.image + ": " + verified.error().message);
    }
  }
  return OkStatus();
}

Status Check(const WorkloadPolicy& p, const Workload& w, SignatureSource& signatures) {
  HS_RETURN_IF_ERROR(CheckSpec(p, w));
  return CheckImages(p, w, signatures);
}

}  // namespace hyperslice::runners::policy
