#include "src/gpu/bootstrap_token.h"

#include <optional>
#include <regex>

#include <boost/json.hpp>

#include "src/base/base64.h"
#include "src/base/log.h"
#include "src/kube/bootstrap_token.h"
#include "src/kube/client.h"
#include "src/kube/object_helpers.h"
#include "src/kube/resource.h"
#include "src/kube/store.h"

namespace hyperslice::gpu {

namespace bj = boost::json;

namespace {

// A label value from a claim name or UID (both are already valid label values up to 63 chars).
std::string LabelValue(const std::string& s) { return s.size() > 63 ? s.substr(0, 63) : s; }

std::string DataField(const bj::object& secret, std::string_view key) {
  const bj::value* data = secret.if_contains("data");
  if (data == nullptr || !data->is_object()) return {};
  const bj::value* v = data->as_object().if_contains(key);
  if (v == nullptr || !v->is_string()) return {};
  auto decoded = Base64Decode(std::string_view(v->as_string()), "secret data");
  return decoded.ok() ? *decoded : std::string();
}

}  // namespace

bool IsBootstrapToken(const std::string& token) {
  static const std::regex kToken("^[a-z0-9]{6}\\.[a-z0-9]{16}$");
  return std::regex_match(token, kToken);
}

Result<BootstrapToken> EnsureBootstrapToken(kube::Client& client, const std::string& claim_name,
                                            const std::string& claim_uid, std::chrono::seconds ttl,
                                            std::chrono::seconds min_left) {
  auto now = std::chrono::system_clock::now();
  kube::ListOptions lo;
  lo.label_selector = std::string(kLabelTokenClaimUid) + "=" + LabelValue(claim_uid);
  auto existing = client.List(kube::resources::Secrets(), kBootstrapTokenNamespace, lo);
  if (!existing.ok()) return existing.error();
  for (const auto& s : existing->items) {
    if (kube::IsDeleting(s)) continue;
    std::string id = DataField(s, "token-id");
    std::string secret = DataField(s, "token-secret");
    auto expires = kube::ParseTime(DataField(s, "expiration"));
    if (!expires || *expires - now < min_left) continue;
    BootstrapToken t{.id = id,
                     .secret_name = std::string(kube::MetaString(s, "name")),
                     .token = id,
                     .expires = *expires};
    t.token += '.';
    t.token += secret;
    if (IsBootstrapToken(t.token)) return t;
  }
  // Whole seconds: the expiration is written with second precision and must not round later.
  auto expires = std::chrono::time_point_cast<std::chrono::seconds>(now) + ttl;
  kube::BootstrapTokenSpec spec;
  spec.description = "hyperslice: kubelet TLS bootstrap token of GPUNodeClaim " + claim_name;
  spec.labels = {{kLabelTokenClaim, LabelValue(claim_name)},
                 {kLabelTokenClaimUid, LabelValue(claim_uid)}};
  spec.expiration = expires;
  spec.extra_groups = kBootstrapTokenGroup;
  auto created = kube::CreateBootstrapToken(client, spec);
  if (!created.ok()) return created.error();
  // The id is public (it names the Secret); the secret half never leaves this function but in
  // the payload.
  log::Info("gpu bootstrap token created", {{"claim", claim_name},
                                            {"secret", created->secret_name},
                                            {"expiresAt", kube::FormatTime(expires)}});
  return BootstrapToken{.id = created->id,
                        .secret_name = created->secret_name,
                        .token = created->Token(),
                        .expires = expires};
}

Result<int> DeleteBootstrapTokens(kube::Client& client, const std::string& claim_uid) {
  kube::ListOptions lo;
  lo.label_selector = std::string(kLabelTokenClaimUid) + "=" + LabelValue(claim_uid);
  auto existing = client.List(kube::resources::Secrets(), kBootstrapTokenNamespace, lo);
  if (!existing.ok()) return existing.error();
  int deleted = 0;
  for (const auto& s : existing->items) {
    std::string name(kube::MetaString(s, "name"));
    Status st = client.Delete(kube::resources::Secrets(), kBootstrapTokenNamespace, name);
    if (!st.ok() && st.error().code != Error::Code::kNotFound) return st.error();
    if (st.ok()) {
      ++deleted;
      log::Info("gpu bootstrap token deleted", {{"secret", name}});
    }
  }
  return deleted;
}

}  // namespace hyperslice::gpu
