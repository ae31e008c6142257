// Secrets only to attested workloads (issue 21 §6, Trustee's KBS model): the key broker's
// decision and its answer. A workload presents an attestation token (attest::TokenIssuer's ES256
// JWT, verified against the controller's JWKS) and a P-256 public key its TEE holds; the named
// secret is released only when the token is valid for the secret's audience, its image_digest is
// one the secret's policy names, and the token binds that very key (claim kKeyBindingClaim =
// hex SHA-256 of the key's DER SubjectPublicKeyInfo, which the agent puts in the quote's report
// data and the issuer copies into the token). The secret leaves encrypted to that key: ECDH
// P-256 with an ephemeral key, HKDF-SHA256, AES-256-GCM.
//
// Errors: kUnauthorized (no or invalid token: 401), kForbidden (valid token, policy says no:
// 403), kNotFound (no such secret), kInvalidArgument (bad key). Messages never hold the secret or
// the token. Thread-safe (pure functions).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "src/base/result.h"
#include "src/net/server.h"

namespace hyperslice::runners::kbs {

inline constexpr char kKeyBindingClaim[] = "tee_pubkey_sha256";

// Who may have one secret.
struct SecretPolicy {
  std::string name;
  std::string audience;                    // the token's aud must be this
  std::vector<std::string> image_digests;  // the token's image_digest must be one of these
};

struct Verifier {
  std::string jwks_json;
  std::string issuer;
  std::chrono::system_clock::time_point now;
};

struct ReleaseRequest {
  std::string token;           // the Authorization: Bearer value ("" when absent)
  std::string public_key_pem;  // the TEE's P-256 key (SubjectPublicKeyInfo PEM)
};

// hex SHA-256 of the key's DER SubjectPublicKeyInfo (what kKeyBindingClaim must hold).
Result<std::string> KeyBinding(const std::string& public_key_pem);

// The decision, then the secret sealed to the caller's key: a JSON envelope
// {"alg":"ECDH-ES+HKDF-SHA256+A256GCM","epk":<PEM>,"iv","ciphertext","tag"} (base64).
Result<std::string> Release(const ReleaseRequest& request, const SecretPolicy& policy,
                            const std::string& secret, const Verifier& verifier);

// The other side (what a workload runs, and the tests): opens an envelope with the private key.
Result<std::string> Open(const std::string& envelope_json, const std::string& private_key_pem);

// The resource endpoint: `POST /kbs/v0/resource/<name>` with `Authorization: Bearer <token>` and
// the body {"publicKey": "<PEM>"}; 200 with the envelope, 401/403/404/400 with a JSON
// {"error": reason, "message": …}. Logs the name, the decision and the reason, never the secret
// or the token. `lookup` gives a secret's policy and value (kNotFound when there is none);
// `verifier` the JWKS and issuer at the time of the call. Runs lookup on the server's thread:
// give the server enough threads, or a lookup that does not block.
struct Secret {
  SecretPolicy policy;
  std::string value;
};
net::Handler NewResourceHandler(std::function<Result<Secret>(const std::string& name)> lookup,
                                std::function<Verifier()> verifier);

}  // namespace hyperslice::runners::kbs
