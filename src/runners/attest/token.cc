// Attestation tokens: ES256 JWTs with EAT-style claims (RFC 9711 names where they exist, Google
// Confidential Space's otherwise), the JWKS and the OIDC discovery body a relying party needs.
#include <openssl/ec.h>
#include <openssl/evp.h>

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include "src/base/base64.h"
#include "src/base/json.h"
#include "src/runners/attest/attest.h"
#include "src/runners/attest/internal/wire.h"

namespace hyperslice::runners::attest {
namespace {

using internal::Pkey;

// The claims TokenClaims names; everything else travels in extra_json.
constexpr std::string_view kCoreClaims[] = {
    "iss", "sub", "aud", "iat", "nbf", "exp", "hwmodel", "dbgstat", "image_digest", "eat_nonce"};

Error Refused(std::string reason, std::string message) {
  return Error::Make(Error::Code::kUnauthorized, std::move(message), std::move(reason));
}

int64_t Seconds(std::chrono::system_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::seconds>(t.time_since_epoch()).count();
}
std::chrono::system_clock::time_point FromSeconds(int64_t s) {
  return std::chrono::system_clock::time_point(std::chrono::seconds(s));
}

Result<boost::json::object> ParseObject(std::string_view text, std::string_view what) {
  boost::system::error_code ec;
  boost::json::value v = boost::json::parse(text, ec);
  if (ec || !v.is_object()) {
    return Refused("TokenMalformed", std::string(what) + " is not a JSON object");
  }
  return std::move(v.as_object());
}

class Es256Issuer final : public TokenIssuer {
 public:
  Es256Issuer(std::string issuer, Pkey key) : issuer_(std::move(issuer)), key_(std::move(key)) {}

  Status Init() {
    HS_ASSIGN_OR_RETURN(auto xy, internal::EcP256Coordinates(key_.get()));
    x_ = Base64UrlEncode(xy.first);
    y_ = Base64UrlEncode(xy.second);
    // RFC 7638: the required members in lexicographic order, no whitespace.
    std::string canonical = R"({"crv":"P-256","kty":"EC","x":")" + x_ + R"(","y":")" + y_ + R"("})";
    auto h = Sha256(canonical);
    kid_ = Base64UrlEncode(std::string_view(reinterpret_cast<const char*>(h.data()), h.size()));
    return OkStatus();
  }

  const std::string& issuer() const override { return issuer_; }
  const std::string& key_id() const override { return kid_; }

  Result<std::string> Issue(TokenClaims c) const override {
    if (c.audience.empty() || c.subject.empty()) {
      return Error::Make(Error::Code::kInvalidArgument, "a token needs an audience and a subject");
    }
    if (c.expires_at <= c.issued_at) {
      return Error::Make(Error::Code::kInvalidArgument, "a token must expire after it is issued");
    }
    boost::json::object claims;
    if (!c.extra_json.empty()) {
      auto extra = ParseObject(c.extra_json, "extra claims");
      if (!extra.ok()) {
        return Error::Make(Error::Code::kInvalidArgument, "extra claims are not a JSON object");
      }
      claims = std::move(*extra);
      for (auto name : kCoreClaims) claims.erase(name);
    }
    claims["iss"] = issuer_;
    claims["sub"] = c.subject;
    claims["aud"] = c.audience;
    claims["iat"] = Seconds(c.issued_at);
    claims["nbf"] = Seconds(c.issued_at);
    claims["exp"] = Seconds(c.expires_at);
    if (!c.hwmodel.empty()) claims["hwmodel"] = c.hwmodel;
    if (!c.dbgstat.empty()) claims["dbgstat"] = c.dbgstat;
    if (!c.image_digest.empty()) claims["image_digest"] = c.image_digest;
    if (c.eat_nonce.size() == 1) {
      claims["eat_nonce"] = c.eat_nonce[0];
    } else if (!c.eat_nonce.empty()) {
      boost::json::array a;
      for (const auto& n : c.eat_nonce) a.emplace_back(n);
      claims["eat_nonce"] = std::move(a);
    }
    boost::json::object header{{"alg", "ES256"}, {"typ", "JWT"}, {"kid", kid_}};
    std::string input = Base64UrlEncode(boost::json::serialize(header)) + "." +
                        Base64UrlEncode(boost::json::serialize(claims));
    std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
    size_t len = 0;
    const auto* in = reinterpret_cast<const unsigned char*>(input.data());
    if (!ctx || EVP_DigestSignInit(ctx.get(), nullptr, EVP_sha256(), nullptr, key_.get()) != 1 ||
        EVP_DigestSign(ctx.get(), nullptr, &len, in, input.size()) != 1) {
      return Error::Make(Error::Code::kInternal, "ES256 signing failed to start");
    }
    std::string der(len, '\0');
    if (EVP_DigestSign(ctx.get(), reinterpret_cast<unsigned char*>(der.data()), &len, in,
                       input.size()) != 1) {
      return Error::Make(Error::Code::kInternal, "ES256 signing failed");
    }
    der.resize(len);
    HS_ASSIGN_OR_RETURN(auto jose, internal::EcdsaDerToJose(der));
    return input + "." + Base64UrlEncode(jose);
  }

  std::string Jwks() const override {
    boost::json::object key{{"kty", "EC"}, {"crv", "P-256"}, {"x", x_},       {"y", y_},
                            {"kid", kid_}, {"use", "sig"},   {"alg", "ES256"}};
    return boost::json::serialize(boost::json::object{{"keys", boost::json::array{key}}});
  }

  std::string OidcDiscovery() const override {
    boost::json::array claims;
    for (auto c : kCoreClaims) claims.emplace_back(c);
    claims.emplace_back("submods");
    return boost::json::serialize(
        boost::json::object{{"issuer", issuer_},
                            {"jwks_uri", issuer_ + "/jwks"},
                            {"response_types_supported", boost::json::array{"id_token"}},
                            {"subject_types_supported", boost::json::array{"public"}},
                            {"id_token_signing_alg_values_supported", boost::json::array{"ES256"}},
                            {"scopes_supported", boost::json::array{"openid"}},
                            {"claims_supported", std::move(claims)}});
  }

 private:
  std::string issuer_;
  Pkey key_;
  std::string x_, y_, kid_;
};

Result<std::unique_ptr<TokenIssuer>> MakeIssuer(std::string issuer, Pkey key) {
  if (issuer.empty()) return Error::Make(Error::Code::kInvalidArgument, "an issuer URL is needed");
  auto out = std::make_unique<Es256Issuer>(std::move(issuer), std::move(key));
  HS_RETURN_IF_ERROR(out->Init());
  return std::unique_ptr<TokenIssuer>(std::move(out));
}

}  // namespace

Result<std::unique_ptr<TokenIssuer>> TokenIssuer::Create(std::string issuer) {
  EVP_PKEY* key = EVP_EC_gen("P-256");
  if (!key) return Error::Make(Error::Code::kInternal, "P-256 key generation failed");
  return MakeIssuer(std::move(issuer), Pkey(key));
}

Result<std::unique_ptr<TokenIssuer>> TokenIssuer::FromPrivateKeyPem(std::string issuer,
                                                                    std::string_view key_pem) {
  HS_ASSIGN_OR_RETURN(auto key, internal::PrivateKeyFromPem(key_pem));
  char group[64] = {};
  size_t glen = 0;
  if (EVP_PKEY_base_id(key.get()) != EVP_PKEY_EC ||
      EVP_PKEY_get_group_name(key.get(), group, sizeof(group), &glen) != 1 ||
      (std::string_view(group) != "prime256v1" && std::string_view(group) != "P-256")) {
    return Error::Make(Error::Code::kInvalidArgument, "the token signing key is not P-256");
  }
  return MakeIssuer(std::move(issuer), std::move(key));
}

Result<TokenClaims> VerifyToken(std::string_view token, std::string_view jwks_json,
                                std::string_view expected_issuer,
                                std::string_view expected_audience,
                                std::chrono::system_clock::time_point now,
                                std::chrono::seconds leeway) {
  size_t d1 = token.find('.');
  size_t d2 = d1 == std::string_view::npos ? d1 : token.find('.', d1 + 1);
  if (d2 == std::string_view::npos || token.find('.', d2 + 1) != std::string_view::npos) {
    return Refused("TokenMalformed", "a JWT has three dot-separated parts");
  }
  auto header_b = Base64UrlDecode(token.substr(0, d1));
  auto claims_b = Base64UrlDecode(token.substr(d1 + 1, d2 - d1 - 1));
  auto sig = Base64UrlDecode(token.substr(d2 + 1));
  if (!header_b.ok() || !claims_b.ok() || !sig.ok()) {
    return Refused("TokenMalformed", "a JWT part is not base64url");
  }
  HS_ASSIGN_OR_RETURN(auto header, ParseObject(*header_b, "the JWT header"));
  if (jsonfield::StringField(header, "alg") != "ES256") {
    return Refused("TokenSignature", "only ES256 tokens are accepted");
  }
  std::string_view kid = jsonfield::StringField(header, "kid");

  HS_ASSIGN_OR_RETURN(auto jwks, ParseObject(jwks_json, "the JWKS"));
  const auto* keys = jsonfield::ArrayField(jwks, "keys");
  if (!keys) return Refused("TokenSignature", "the JWKS has no keys");
  const boost::json::object* jwk = nullptr;
  for (const auto& k : *keys) {
    if (!k.is_object()) continue;
    const auto& o = k.as_object();
    if (jsonfield::StringField(o, "kty") != "EC" || jsonfield::StringField(o, "crv") != "P-256") {
      continue;
    }
    if (kid.empty() ? keys->size() == 1 : jsonfield::StringField(o, "kid") == kid) jwk = &o;
  }
  if (!jwk) return Refused("TokenSignature", "no JWKS key matches the token's kid");
  auto x = Base64UrlDecode(jsonfield::StringField(*jwk, "x"));
  auto y = Base64UrlDecode(jsonfield::StringField(*jwk, "y"));
  if (!x.ok() || !y.ok()) return Refused("TokenSignature", "the JWKS key is malformed");
  auto key = internal::EcP256PublicKey(*x, *y);
  if (!key.ok()) return Refused("TokenSignature", "the JWKS key is not a P-256 point");
  auto der = internal::EcdsaJoseToDer(*sig);
  if (!der.ok() || !internal::VerifySignature(key->get(), token.substr(0, d2), *der)) {
    return Refused("TokenSignature", "the token's signature does not verify");
  }

  HS_ASSIGN_OR_RETURN(auto claims, ParseObject(*claims_b, "the JWT claims"));
  TokenClaims out;
  out.issuer = std::string(jsonfield::StringField(claims, "iss"));
  if (out.issuer != expected_issuer) {
    return Refused("TokenIssuer", "the token was issued by \"" + out.issuer + "\"");
  }
  bool aud_ok = false;
  if (const auto* aud = claims.if_contains("aud"); aud && aud->is_string()) {
    out.audience = std::string(aud->as_string());
    aud_ok = out.audience == expected_audience;
  } else if (aud && aud->is_array()) {
    for (const auto& a : aud->as_array()) {
      if (a.is_string() && a.as_string() == expected_audience) {
        aud_ok = true;
        out.audience = std::string(expected_audience);
      }
    }
  }
  if (!aud_ok) return Refused("TokenAudience", "the token is for another audience");
  auto exp = jsonfield::IntField(claims, "exp");
  auto iat = jsonfield::IntField(claims, "iat");
  if (!exp || !iat) return Refused("TokenMalformed", "the token lacks exp or iat");
  if (FromSeconds(*exp) + leeway <= now) return Refused("TokenExpired", "the token has expired");
  if (auto nbf = jsonfield::IntField(claims, "nbf"); nbf && FromSeconds(*nbf) - leeway > now) {
    return Refused("TokenNotYetValid", "the token is not valid yet");
  }
  out.expires_at = FromSeconds(*exp);
  out.issued_at = FromSeconds(*iat);
  out.subject = std::string(jsonfield::StringField(claims, "sub"));
  out.hwmodel = std::string(jsonfield::StringField(claims, "hwmodel"));
  out.dbgstat = std::string(jsonfield::StringField(claims, "dbgstat"));
  out.image_digest = std::string(jsonfield::StringField(claims, "image_digest"));
  if (const auto* n = claims.if_contains("eat_nonce"); n && n->is_string()) {
    out.eat_nonce.emplace_back(n->as_string());
  } else if (n && n->is_array()) {
    for (const auto& e : n->as_array()) {
      if (e.is_string()) out.eat_nonce.emplace_back(e.as_string());
    }
  }
  for (auto name : kCoreClaims) claims.erase(name);
  if (!claims.empty()) out.extra_json = boost::json::serialize(claims);
  return out;
}

}  // namespace hyperslice::runners::attest
