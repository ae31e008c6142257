#include "src/runners/controlnode/join_tokens.h"

#include <openssl/crypto.h>
#include <openssl/rand.h>

#include <boost/json.hpp>

#include "src/base/base64.h"
#include "src/base/json.h"
#include "src/kube/object_helpers.h"
#include "src/kube/store.h"
#include "src/runners/controlnode/api.h"

namespace hyperslice::runners::controlnode {
namespace {

namespace json = boost::json;

Error Refused() {
  return Error::Make(Error::Code::kUnauthorized,
                     "join token refused (unknown, wrong, expired or already used)",
                     link::kReasonJoinTokenRefused);
}

std::string Field(const kube::Object& secret, const char* key) {
  const json::object* data = jsonfield::ObjectField(secret, "data");
  if (data == nullptr) return {};
  auto v = jsonfield::StringField(*data, key);
  auto d = Base64Decode(v, key);
  return d.ok() ? *d : std::string();
}

bool Expired(const kube::Object& secret) {
  auto t = kube::ParseTime(Field(secret, "expiration"));
  return !t || *t <= std::chrono::system_clock::now();
}

}  // namespace

std::string JoinTokenSecretName(const std::string& runner) { return "runner-join-" + runner; }

SecretJoinTokens::SecretJoinTokens(std::shared_ptr<kube::Client> client, std::string ns,
                                   std::chrono::seconds ttl)
    : client_(std::move(client)), ns_(std::move(ns)), ttl_(ttl) {}

Result<bool> SecretJoinTokens::Ensure(const kube::Object& runner) {
  std::string name = std::string(kube::MetaString(runner, "name"));
  auto got = client_->Get(kube::resources::Secrets(), ns_, JoinTokenSecretName(name));
  if (got.ok()) {
    if (!Expired(*got)) return false;
    kube::DeleteOptions d;
    d.precondition_uid = std::string(kube::MetaString(*got, "uid"));
    Status del = client_->Delete(kube::resources::Secrets(), ns_, JoinTokenSecretName(name), d);
    if (!del.ok() && del.error().code != Error::Code::kNotFound) return del.error();
  } else if (got.error().code != Error::Code::kNotFound) {
    return got.error();
  }
  // The caller's Runner may come from a cache that has not seen Consume's mark yet: read it live
  // before minting, so a token that was just used is not replaced by a fresh one.
  auto live = client_->Get(Runners(), "", name);
  if (!live.ok()) return live.error();
  const auto* meta = jsonfield::ObjectField(*live, "metadata");
  const auto* annotations =
      meta != nullptr ? jsonfield::ObjectField(*meta, "annotations") : nullptr;
  if (annotations != nullptr &&
      !jsonfield::StringField(*annotations, kJoinTokenConsumedAnnotation).empty()) {
    return false;
  }
  unsigned char raw[32];
  if (RAND_bytes(raw, sizeof raw) != 1) {
    return Error::Make(Error::Code::kInternal, "no randomness for a join token");
  }
  static const char* hex = "0123456789abcdef";
  std::string token;
  for (unsigned char c : raw) {
    token += hex[c >> 4];
    token += hex[c & 15];
  }
  OPENSSL_cleanse(raw, sizeof raw);
  kube::Object secret{
      {"apiVersion", "v1"},
      {"kind", "Secret"},
      {"metadata", json::object{{"name", JoinTokenSecretName(name)},
                                {"namespace", ns_},
                                {"labels", json::object{{"runners.hyperslice.dev/runner", name}}}}},
      {"type", kJoinTokenSecretType},
      {"data", json::object{{"token", Base64Encode(token)},
                            {"runner", Base64Encode(name)},
                            {"expiration", Base64Encode(kube::FormatTime(
                                               std::chrono::system_clock::now() + ttl_))}}}};
  HS_RETURN_IF_ERROR(kube::SetOwnerReference(runner, secret));
  auto created = client_->Create(kube::resources::Secrets(), ns_, secret);
  if (!created.ok()) {
    if (created.error().code == Error::Code::kAlreadyExists) return false;
    return created.error();
  }
  return true;
}

Result<std::optional<std::string>> SecretJoinTokens::Token(const std::string& runner) {
  auto got = client_->Get(kube::resources::Secrets(), ns_, JoinTokenSecretName(runner));
  if (!got.ok()) {
    if (got.error().code == Error::Code::kNotFound) return std::optional<std::string>();
    return got.error();
  }
  std::string token = Field(*got, "token");
  if (token.empty() || Expired(*got) || Field(*got, "runner") != runner) {
    return std::optional<std::string>();
  }
  return std::optional<std::string>(std::move(token));
}

Status SecretJoinTokens::Remove(const std::string& runner) {
  Status st = client_->Delete(kube::resources::Secrets(), ns_, JoinTokenSecretName(runner));
  if (!st.ok() && st.error().code != Error::Code::kNotFound) return st;
  return OkStatus();
}

Status SecretJoinTokens::Consume(const std::string& runner, const std::string& token) {
  auto got = client_->Get(kube::resources::Secrets(), ns_, JoinTokenSecretName(runner));
  if (!got.ok()) {
    if (got.error().code == Error::Code::kNotFound) return Refused();
    return got.error();
  }
  if (jsonfield::StringField(*got, "type") != kJoinTokenSecretType) return Refused();
  std::string want = Field(*got, "token");
  if (want.empty() || want.size() != token.size() ||
      CRYPTO_memcmp(want.data(), token.data(), want.size()) != 0 || Expired(*got) ||
      Field(*got, "runner") != runner) {
    return Refused();
  }
  // The Runner is marked first, so no reconcile that sees the Secret gone mints a new token for
  // a runner that is linking (Ensure re-reads the mark live before minting). A mark left by a
  // delete that then loses to another consumer is harmless: the token was used either way.
  json::object patch{
      {"metadata",
       json::object{
           {"annotations", json::object{{kJoinTokenConsumedAnnotation,
                                         kube::FormatTime(std::chrono::system_clock::now())}}}}}};
  auto patched =
      client_->Patch(Runners(), "", runner, kube::PatchType::kMerge, json::serialize(patch));
  if (!patched.ok() && patched.error().code != Error::Code::kNotFound) return patched.error();
  // Only one consumer deletes this version of the Secret.
  kube::DeleteOptions d;
  d.precondition_uid = std::string(kube::MetaString(*got, "uid"));
  d.precondition_resource_version = std::string(kube::ResourceVersionOf(*got));
  Status del = client_->Delete(kube::resources::Secrets(), ns_, JoinTokenSecretName(runner), d);
  if (!del.ok()) {
    if (del.error().code == Error::Code::kNotFound || del.error().code == Error::Code::kConflict) {
      return Refused();
    }
    return del;
  }
  return OkStatus();
}

}  // namespace hyperslice::runners::controlnode
