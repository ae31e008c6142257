#include "src/gpu/bootstrap_token.h"

#include <openssl/rand.h>

#include <ctime>
#include <optional>
#include <regex>

#include <boost/json.hpp>

#include "src/base/base64.h"
#include "src/base/log.h"
#include "src/kube/client.h"
#include "src/kube/object_helpers.h"
#include "src/kube/resource.h"
#include "src/kube/store.h"

namespace hyperslice::gpu {

namespace bj = boost::json;

namespace {

constexpr char kSecretType[] = "bootstrap.kubernetes.io/token";
constexpr char kSecretNamePrefix[] = "bootstrap-token-";
constexpr int kCreateAttempts = 5;

// [a-z0-9]{n} from the CSPRNG; rejection sampling keeps every character equally likely.
Result<std::string> RandomChars(size_t n) {
  static constexpr char kAlphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789";
  constexpr unsigned kLimit = 252;  // the largest multiple of 36 below 256
  std::string out;
  while (out.size() < n) {
    unsigned char buf[32];
    if (RAND_bytes(buf, sizeof buf) != 1) {
      return Error::Make(Error::Code::kInternal, "the random number generator failed",
                         "RandFailed");
    }
    for (unsigned char b : buf) {
      if (b < kLimit && out.size() < n) out.push_back(kAlphabet[b % 36]);
    }
  }
  return out;
}

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

// "2006-01-02T15:04:05Z" (what FormatTime writes and the tokencleaner reads).
std::optional<std::chrono::system_clock::time_point> ParseUtc(const std::string& s) {
  std::tm tm{};
  if (s.size() < 20 || ::strptime(s.c_str(), "%Y-%m-%dT%H:%M:%SZ", &tm) == nullptr) {
    return std::nullopt;
  }
  return std::chrono::system_clock::from_time_t(::timegm(&tm));
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
    auto expires = ParseUtc(DataField(s, "expiration"));
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
  for (int attempt = 0; attempt < kCreateAttempts; ++attempt) {
    HS_ASSIGN_OR_RETURN(std::string id, RandomChars(6));
    HS_ASSIGN_OR_RETURN(std::string secret, RandomChars(16));
    BootstrapToken t{
        .id = id, .secret_name = kSecretNamePrefix + id, .token = id, .expires = expires};
    t.token += '.';
    t.token += secret;
    bj::object body{
        {"apiVersion", "v1"},
        {"kind", "Secret"},
        {"metadata",
         bj::object{{"name", t.secret_name},
                    {"namespace", kBootstrapTokenNamespace},
                    {"labels", bj::object{{kLabelTokenClaim, LabelValue(claim_name)},
                                          {kLabelTokenClaimUid, LabelValue(claim_uid)}}}}},
        {"type", kSecretType},
        {"stringData",
         bj::object{{"description",
                     "hyperslice: kubelet TLS bootstrap token of GPUNodeClaim " + claim_name},
                    {"token-id", id},
                    {"token-secret", secret},
                    {"expiration", kube::FormatTime(expires)},
                    {"usage-bootstrap-authentication", "true"},
                    {"auth-extra-groups", kBootstrapTokenGroup}}}};
    auto created = client.Create(kube::resources::Secrets(), kBootstrapTokenNamespace, body);
    if (created.ok()) {
      // The id is public (it names the Secret); the secret half never leaves this function but in
      // the payload.
      log::Info("gpu bootstrap token created", {{"claim", claim_name},
                                                {"secret", t.secret_name},
                                                {"expiresAt", kube::FormatTime(expires)}});
      return t;
    }
    if (created.error().code != Error::Code::kAlreadyExists) return created.error();
  }
  return Error::Make(Error::Code::kInternal, "could not find a free bootstrap token id",
                     "TokenIdExhausted");
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
