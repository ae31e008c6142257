#include "src/kube/bootstrap_token.h"

#include <openssl/rand.h>

#include <boost/json.hpp>

#include "src/kube/client.h"
#include "src/kube/object_helpers.h"

namespace hyperslice::kube {
namespace {

constexpr char kSecretType[] = "bootstrap.kubernetes.io/token";
constexpr int kCreateAttempts = 5;

// [a-z0-9]{n} from the OpenSSL CSPRNG; rejection sampling keeps every character equally likely.
Result<std::string> RandomChars(size_t n) {
  static constexpr char kAlphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789";
  constexpr unsigned kLimit = 252;  // the largest multiple of 36 that fits a byte
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

}  // namespace

Result<BootstrapToken> CreateBootstrapToken(Client& client, const BootstrapTokenSpec& spec) {
  namespace bj = boost::json;
  for (int attempt = 0; attempt < kCreateAttempts; ++attempt) {
    BootstrapToken t;
    HS_ASSIGN_OR_RETURN(t.id, RandomChars(6));
    HS_ASSIGN_OR_RETURN(t.secret, RandomChars(16));
    t.secret_name = kBootstrapTokenSecretPrefix + t.id;
    bj::object meta{{"name", t.secret_name}, {"namespace", kBootstrapTokenNamespace}};
    bj::object labels, annotations;
    for (const auto& [k, v] : spec.labels) labels[k] = v;
    for (const auto& [k, v] : spec.annotations) annotations[k] = v;
    if (!labels.empty()) meta["labels"] = std::move(labels);
    if (!annotations.empty()) meta["annotations"] = std::move(annotations);
    bj::object data{{"description", spec.description},
                    {"token-id", t.id},
                    {"token-secret", t.secret},
                    {"expiration", FormatTime(spec.expiration)},
                    {"usage-bootstrap-authentication", "true"}};
    if (spec.signing) data["usage-bootstrap-signing"] = "true";
    if (!spec.extra_groups.empty()) data["auth-extra-groups"] = spec.extra_groups;
    bj::object body{{"apiVersion", "v1"},
                    {"kind", "Secret"},
                    {"metadata", std::move(meta)},
                    {"type", kSecretType},
                    {"stringData", std::move(data)}};
    auto created = client.Create(resources::Secrets(), kBootstrapTokenNamespace, body);
    if (created.ok()) return t;
    // An id another token holds: draw again. Anything else is the apiserver's answer.
    if (created.error().code != Error::Code::kAlreadyExists) return created.error();
  }
  return Error::Make(Error::Code::kInternal, "could not find a free bootstrap token id",
                     "TokenIdExhausted");
}

}  // namespace hyperslice::kube
