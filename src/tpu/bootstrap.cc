// Pull-model bootstrap (internal/bootstrap.h): per RUNNING VM a kubeadm bootstrap token Secret in
// kube-system and the join values in that VM's metadata; both removed once its Node has joined.
//
// The Secret is the record of what may sit in a VM's metadata, so a settled group costs no GCE
// call:
//   - a Secret is created before its token is written to the VM, and deleted only after the
//     kubeadm-* keys are removed from the VM (or the VM is gone);
//   - after a confirmed write the Secret gets the annotation kMetadataWrittenAnnotation, a digest
//     of what was written (CA hash, control-plane address, provider id); while it matches, the VM
//     is not touched again;
//   - a VM that is seen not RUNNING loses that annotation (a VM re-created under the same name
//     starts with the template's metadata and must be written again).
// Tokens never reach a log line or an error message.
#include "src/tpu/internal/bootstrap.h"

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <algorithm>
#include <cstdint>
#include <ctime>
#include <map>
#include <optional>
#include <utility>

#include <boost/json.hpp>

#include "src/base/json.h"
#include "src/base/log.h"
#include "src/gce/compute.h"
#include "src/kube/bootstrap_token.h"
#include "src/kube/client.h"
#include "src/kube/object_helpers.h"
#include "src/tpu/api.h"

namespace hyperslice::tpu::internal {

using jsonfield::ObjectField;
using jsonfield::StringValue;

namespace json = boost::json;
using kube::Object;

namespace {

constexpr char kTokenNamespace[] = "kube-system";
constexpr char kNodeTokenGroup[] = "system:bootstrappers:kubeadm:default-node-token";
// Annotations on a token Secret: which VM it is for, and the digest of what was written there.
constexpr char kProviderIdAnnotation[] = "tpu.google.com/provider-id";
constexpr char kGroupAnnotation[] = "tpu.google.com/tpu-node-group";
constexpr char kMetadataWrittenAnnotation[] = "tpu.google.com/metadata-written";
// How long one setMetadata operation is waited for; when it runs longer the write is confirmed
// by the next Reconcile (it re-reads the VM and finds the values in place).
constexpr auto kMetadataWait = std::chrono::seconds(20);

std::string MetaField(const Object& o, std::string_view key) {
  const auto* meta = ObjectField(o, "metadata");
  return meta == nullptr ? std::string() : StringValue(*meta, key);
}

std::string MapField(const Object& o, std::string_view map, std::string_view key) {
  const auto* meta = ObjectField(o, "metadata");
  const auto* m = meta == nullptr ? nullptr : ObjectField(*meta, map);
  return m == nullptr ? std::string() : StringValue(*m, key);
}

std::string HexOf(const unsigned char* p, size_t n) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s;
  s.reserve(n * 2);
  for (size_t i = 0; i < n; ++i) {
    s.push_back(kHex[p[i] >> 4]);
    s.push_back(kHex[p[i] & 0xf]);
  }
  return s;
}

Result<std::string> Sha256Hex(std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(data.data(), data.size(), md, &len, EVP_sha256(), nullptr) != 1) {
    return Error::Make(Error::Code::kInternal, "sha256 failed", "DigestFailed");
  }
  return HexOf(md, len);
}

std::optional<std::string> Base64Decode(std::string_view in) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    if (c == '=') break;
    int v = value(c);
    if (v < 0) return std::nullopt;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  return out;
}

// A Secret's data value (base64 in `data`; `stringData` never comes back from the apiserver).
std::string SecretValue(const Object& secret, std::string_view key) {
  const auto* data = ObjectField(secret, "data");
  if (data == nullptr) return {};
  auto decoded = Base64Decode(StringValue(*data, key));
  return decoded ? *decoded : std::string();
}

// One token Secret of the group, as read from the apiserver.
struct TokenSecret {
  std::string name;
  std::string instance;     // kSecretLabelInstance
  std::string provider_id;  // kProviderIdAnnotation
  std::string written;      // kMetadataWrittenAnnotation
  std::string token;        // "<id>.<secret>"
  std::optional<std::chrono::system_clock::time_point> expiration;
};

TokenSecret ReadTokenSecret(const Object& secret) {
  TokenSecret t;
  t.name = MetaField(secret, "name");
  t.instance = MapField(secret, "labels", kSecretLabelInstance);
  t.provider_id = MapField(secret, "annotations", kProviderIdAnnotation);
  t.written = MapField(secret, "annotations", kMetadataWrittenAnnotation);
  std::string id = SecretValue(secret, "token-id");
  std::string sec = SecretValue(secret, "token-secret");
  if (!id.empty() && !sec.empty()) t.token = id + "." + sec;
  t.expiration = kube::ParseTime(SecretValue(secret, "expiration"));
  return t;
}

bool IsNotFound(const Error& e) { return e.code == Error::Code::kNotFound; }

// Keeps the first error of a pass over many instances; the others are logged.
class FirstError {
 public:
  void Add(const Error& e) {
    if (!first_) first_ = e;
    ++count_;
  }
  Status Get() const {
    if (!first_) return OkStatus();
    Error e = *first_;
    if (count_ > 1) e.message += " (and " + std::to_string(count_ - 1) + " more errors)";
    return e;
  }

 private:
  std::optional<Error> first_;
  int count_ = 0;
};

}  // namespace

Bootstrapper::Bootstrapper(std::shared_ptr<kube::Client> client,
                           std::shared_ptr<gce::Compute> compute, BootstrapOptions options)
    : client_(std::move(client)),
      compute_(std::move(compute)),
      options_(std::move(options)),
      wall_(options_.clock) {}

namespace {

// Everything one Reconcile pass needs; lives for that pass only.
class Pass {
 public:
  Pass(kube::Client& client, gce::Compute& compute, const BootstrapOptions& options,
       std::chrono::system_clock::time_point now, std::string group_ref, std::string uid,
       std::string control_plane)
      : client_(client),
        compute_(compute),
        options_(options),
        now_(now),
        group_ref_(std::move(group_ref)),
        uid_(std::move(uid)),
        control_plane_(std::move(control_plane)) {}

  std::chrono::system_clock::time_point Now() const { return now_; }

  Result<std::vector<TokenSecret>> ListSecrets() {
    kube::ListOptions lo;
    lo.label_selector = std::string(kSecretLabelGroupUid) + "=" + KubeLabelValue(uid_);
    HS_ASSIGN_OR_RETURN(auto list,
                        client_.ListAll(kube::resources::Secrets(), kTokenNamespace, lo));
    std::vector<TokenSecret> out;
    out.reserve(list.items.size());
    for (const auto& item : list.items) out.push_back(ReadTokenSecret(item));
    return out;
  }

  // What the metadata of `inst` must hold, digested (the Secret's written-annotation value).
  Result<std::string> WrittenDigest(const InstanceState& inst) const {
    HS_ASSIGN_OR_RETURN(std::string hex, Sha256Hex(options_.ca_hash + "\n" + control_plane_ + "\n" +
                                                   ProviderId(inst.project, inst.zone, inst.name)));
    return hex.substr(0, 32);
  }

  Result<TokenSecret> CreateSecret(const InstanceState& inst) {
    auto expiration =
        Now() + std::chrono::duration_cast<std::chrono::system_clock::duration>(options_.token_ttl);
    std::string provider_id = ProviderId(inst.project, inst.zone, inst.name);
    kube::BootstrapTokenSpec spec;
    spec.description = "hyperslice: kubeadm join token of instance " + inst.name +
                       " of TPUNodeGroup " + group_ref_;
    spec.labels = {{kSecretLabelGroupUid, KubeLabelValue(uid_)},
                   {kSecretLabelInstance, KubeLabelValue(inst.name)}};
    spec.annotations = {{kProviderIdAnnotation, provider_id}, {kGroupAnnotation, group_ref_}};
    spec.expiration = expiration;
    spec.signing = true;
    spec.extra_groups = kNodeTokenGroup;
    HS_ASSIGN_OR_RETURN(kube::BootstrapToken created, kube::CreateBootstrapToken(client_, spec));
    log::Info("bootstrap token created", {{"group", group_ref_},
                                          {"instance", inst.name},
                                          {"expiresAt", kube::FormatTime(expiration)}});
    TokenSecret t;
    t.name = created.secret_name;
    t.instance = KubeLabelValue(inst.name);
    t.provider_id = provider_id;
    t.token = created.Token();
    t.expiration = expiration;
    return t;
  }

  Status DeleteSecret(const TokenSecret& t) {
    auto st = client_.Delete(kube::resources::Secrets(), kTokenNamespace, t.name);
    if (!st.ok() && !IsNotFound(st.error())) return st.error();
    return OkStatus();
  }

  Status Annotate(const TokenSecret& t, const std::optional<std::string>& written) {
    json::object annotations;
    if (written) {
      annotations[kMetadataWrittenAnnotation] = *written;
    } else {
      annotations[kMetadataWrittenAnnotation] = nullptr;
    }
    json::object patch{{"metadata", json::object{{"annotations", std::move(annotations)}}}};
    auto r = client_.Patch(kube::resources::Secrets(), kTokenNamespace, t.name,
                           kube::PatchType::kMerge, json::serialize(patch));
    if (!r.ok()) return r.error();
    return OkStatus();
  }

  // Removes the kubeadm-* keys from a VM; a VM that is gone is fine.
  Status ClearMetadata(const std::string& project, const std::string& zone, const std::string& name,
                       BootstrapReport& report) {
    auto r = ClearJoinValues(compute_, project, zone, name, kMetadataWait);
    if (!r.ok()) {
      if (IsNotFound(r.error())) return OkStatus();
      return r.error();
    }
    if (!r->settled) {
      return Error::Make(Error::Code::kTimeout,
                         "removing the join values from instance " + name + " is still running",
                         "operationNotDone");
    }
    if (r->changed) {
      ++report.metadata_cleared;
      log::Info("join values removed from instance", {{"group", group_ref_}, {"instance", name}});
    }
    return OkStatus();
  }

  // A VM whose token is no longer needed: its metadata first, then its Secrets.
  Status Retire(const std::string& project, const std::string& zone, const std::string& name,
                const std::vector<const TokenSecret*>& secrets, BootstrapReport& report) {
    HS_RETURN_IF_ERROR(ClearMetadata(project, zone, name, report));
    for (const auto* t : secrets) {
      HS_RETURN_IF_ERROR(DeleteSecret(*t));
      ++report.tokens_deleted;
    }
    return OkStatus();
  }

  // A RUNNING VM that has not joined: one valid token, written to its metadata.
  Status Provide(const InstanceState& inst, const std::vector<const TokenSecret*>& secrets,
                 BootstrapReport& report) {
    const std::string provider_id = ProviderId(inst.project, inst.zone, inst.name);
    const auto now = Now();
    const auto min_left = std::chrono::duration_cast<std::chrono::system_clock::duration>(
        options_.token_min_remaining);
    // The token to use: the one with the latest expiration that has enough time left.
    const TokenSecret* current = nullptr;
    for (const auto* t : secrets) {
      if (t->token.empty() || !t->expiration || t->provider_id != provider_id) continue;
      if (*t->expiration - now <= min_left) continue;
      if (current == nullptr || *t->expiration > *current->expiration) current = t;
    }
    std::optional<TokenSecret> fresh;
    if (current == nullptr) {
      HS_ASSIGN_OR_RETURN(fresh, CreateSecret(inst));
      ++report.tokens_created;
      current = &*fresh;
    }
    HS_ASSIGN_OR_RETURN(std::string digest, WrittenDigest(inst));
    if (current->written != digest) {
      const gce::MetadataItems want = {{kMetaJoinToken, current->token},
                                       {kMetaCaHash, options_.ca_hash},
                                       {kMetaControlPlane, control_plane_}};
      auto r = WriteJoinValues(compute_, inst.project, inst.zone, inst.name, want, kMetadataWait);
      if (!r.ok()) {
        if (IsNotFound(r.error())) return OkStatus();  // gone; its Secret goes when unlisted
        return r.error();
      }
      if (r->changed) {
        ++report.metadata_written;
        log::Info("join values written to instance",
                  {{"group", group_ref_}, {"instance", inst.name}});
      }
      if (r->settled) HS_RETURN_IF_ERROR(Annotate(*current, digest));
    }
    report.waiting.push_back(inst.name);
    // Replaced tokens: the VM's metadata holds the current one now.
    for (const auto* t : secrets) {
      if (t->name == current->name) continue;
      HS_RETURN_IF_ERROR(DeleteSecret(*t));
      ++report.tokens_deleted;
    }
    return OkStatus();
  }

  // A VM that is listed but not RUNNING (booting, stopping, being re-created): its token stays,
  // but the next RUNNING state writes the metadata again.
  Status Forget(const std::vector<const TokenSecret*>& secrets) {
    for (const auto* t : secrets) {
      if (!t->written.empty()) HS_RETURN_IF_ERROR(Annotate(*t, std::nullopt));
    }
    return OkStatus();
  }

 private:
  kube::Client& client_;
  gce::Compute& compute_;
  const BootstrapOptions& options_;
  std::chrono::system_clock::time_point now_;
  std::string group_ref_;
  std::string uid_;
  std::string control_plane_;
};

}  // namespace

namespace {

// One metadata read-modify-write, its operation waited for up to `wait`.
Result<MetadataWrite> UpdateMetadata(gce::Compute& compute, const std::string& project,
                                     const std::string& zone, const std::string& name,
                                     const std::function<bool(gce::MetadataItems&)>& mutate,
                                     Clock::Duration wait) {
  HS_ASSIGN_OR_RETURN(auto op, compute.UpdateInstanceMetadata(project, zone, name, mutate));
  MetadataWrite out;
  out.changed = op.has_value();
  if (!op) return out;
  if (op->done()) {
    if (op->error) return *op->error;
    return out;
  }
  auto done = compute.Wait(op->ref, wait);
  if (done.ok()) return out;
  if (done.error().code != Error::Code::kTimeout) return done.error();
  out.settled = false;
  return out;
}

}  // namespace

Result<MetadataWrite> WriteJoinValues(gce::Compute& compute, const std::string& project,
                                      const std::string& zone, const std::string& name,
                                      const gce::MetadataItems& values, Clock::Duration wait) {
  return UpdateMetadata(
      compute, project, zone, name,
      [&values](gce::MetadataItems& items) {
        bool any = false;
        for (const auto& [k, v] : values) {
          auto it = items.find(k);
          if (it != items.end() && it->second == v) continue;
          items[k] = v;
          any = true;
        }
        return any;
      },
      wait);
}

Result<MetadataWrite> ClearJoinValues(gce::Compute& compute, const std::string& project,
                                      const std::string& zone, const std::string& name,
                                      Clock::Duration wait) {
  return UpdateMetadata(
      compute, project, zone, name,
      [](gce::MetadataItems& items) {
        bool any = false;
        for (const char* key : {kMetaJoinToken, kMetaCaHash, kMetaControlPlane}) {
          any = items.erase(key) > 0 || any;
        }
        return any;
      },
      wait);
}

Result<BootstrapReport> Bootstrapper::Reconcile(const kube::Object& group,
                                                const std::vector<InstanceState>& instances,
                                                const std::set<std::string>& joined) {
  const std::string uid = MetaField(group, "uid");
  const std::string group_ref = MetaField(group, "namespace") + "/" + MetaField(group, "name");
  if (uid.empty()) {
    return Error::Make(Error::Code::kInvalidArgument,
                       "TPUNodeGroup " + group_ref + " has no metadata.uid", "MissingUid");
  }
  std::string control_plane;
  if (const auto* spec = ObjectField(group, "spec")) {
    if (const auto* bk = ObjectField(*spec, "bootstrapKubernetes"))
      control_plane = StringValue(*bk, "controlPlaneIP");
  }
  if (control_plane.empty()) {
    return Error::Make(
        Error::Code::kInvalidArgument,
        "TPUNodeGroup " + group_ref + " has no spec.bootstrapKubernetes.controlPlaneIP",
        "MissingControlPlane");
  }
  if (options_.ca_hash.rfind("sha256:", 0) != 0) {
    return Error::Make(Error::Code::kInvalidArgument,
                       "the bootstrap needs the cluster CA hash (\"sha256:<hex>\")",
                       "MissingCaHash");
  }

  // Wall-clock now; with a test clock, the construction time moved by as much as it advanced.
  Pass pass(*client_, *compute_, options_, wall_.Now(), group_ref, uid, control_plane);
  HS_ASSIGN_OR_RETURN(auto secrets, pass.ListSecrets());

  std::map<std::string, std::vector<const TokenSecret*>> by_instance;
  for (const auto& t : secrets) by_instance[t.instance].push_back(&t);

  BootstrapReport report;
  FirstError errors;
  std::set<std::string> listed;
  for (const auto& inst : instances) {
    const std::string label = KubeLabelValue(inst.name);
    listed.insert(label);
    auto it = by_instance.find(label);
    static const std::vector<const TokenSecret*> kNone;
    const auto& mine = it == by_instance.end() ? kNone : it->second;
    const std::string provider_id = inst.provider_id.empty()
                                        ? ProviderId(inst.project, inst.zone, inst.name)
                                        : inst.provider_id;

    Status st;
    if (joined.count(provider_id) > 0) {
      if (!mine.empty()) st = pass.Retire(inst.project, inst.zone, inst.name, mine, report);
    } else if (inst.instance_status == "RUNNING") {
      st = pass.Provide(inst, mine, report);
    } else {
      st = pass.Forget(mine);
    }
    if (!st.ok()) {
      log::Warn("bootstrap of instance failed",
                {{"group", group_ref}, {"instance", inst.name}, {"error", st.error().ToString()}});
      errors.Add(st.error());
    }
  }

  // Tokens of VMs the group no longer lists (deleted, or replaced under another name).
  for (const auto& [label, mine] : by_instance) {
    if (listed.count(label) > 0) continue;
    Status st;
    auto ref = ParseProviderId(mine.front()->provider_id);
    if (ref.ok()) {
      st = pass.Retire(ref->project, ref->zone, ref->name, mine, report);
    } else {
      // Not ours to touch in GCE without knowing where it is; the Secret goes.
      for (const auto* t : mine) {
        st = pass.DeleteSecret(*t);
        if (!st.ok()) break;
        ++report.tokens_deleted;
      }
    }
    if (!st.ok()) {
      log::Warn("retiring the token of an unlisted instance failed",
                {{"group", group_ref}, {"instance", label}, {"error", st.error().ToString()}});
      errors.Add(st.error());
    }
  }
  HS_RETURN_IF_ERROR(errors.Get());
  return report;
}

Status Bootstrapper::Cleanup(const kube::Object& group) {
  const std::string uid = MetaField(group, "uid");
  if (uid.empty()) {
    return Error::Make(Error::Code::kInvalidArgument, "TPUNodeGroup has no metadata.uid",
                       "MissingUid");
  }
  kube::ListOptions lo;
  lo.label_selector = std::string(kSecretLabelGroupUid) + "=" + KubeLabelValue(uid);
  HS_ASSIGN_OR_RETURN(auto list, client_->ListAll(kube::resources::Secrets(), kTokenNamespace, lo));
  for (const auto& item : list.items) {
    auto st = client_->Delete(kube::resources::Secrets(), kTokenNamespace, MetaField(item, "name"));
    if (!st.ok() && !IsNotFound(st.error())) return st.error();
  }
  if (!list.items.empty()) {
    log::Info("bootstrap tokens of the group deleted",
              {{"group", MetaField(group, "namespace") + "/" + MetaField(group, "name")},
               {"count", static_cast<int64_t>(list.items.size())}});
  }
  return OkStatus();
}

Result<std::string> CaCertHash(std::string_view ca_pem) {
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(
      BIO_new_mem_buf(ca_pem.data(), static_cast<int>(ca_pem.size())), &BIO_free);
  if (!bio) return Error::Make(Error::Code::kInternal, "out of memory", "OutOfMemory");
  std::unique_ptr<X509, decltype(&X509_free)> cert(
      PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr), &X509_free);
  if (!cert) {
    return Error::Make(Error::Code::kInvalidArgument, "the cluster CA is not a PEM certificate",
                       "InvalidCertificate");
  }
  unsigned char* der = nullptr;
  int len = i2d_X509_PUBKEY(X509_get_X509_PUBKEY(cert.get()), &der);
  if (len <= 0 || der == nullptr) {
    return Error::Make(Error::Code::kInvalidArgument,
                       "the cluster CA's public key cannot be encoded", "InvalidCertificate");
  }
  auto hex =
      Sha256Hex(std::string_view(reinterpret_cast<const char*>(der), static_cast<size_t>(len)));
  OPENSSL_free(der);
  if (!hex.ok()) return hex.error();
  return "sha256:" + *hex;
}

}  // namespace hyperslice::tpu::internal
