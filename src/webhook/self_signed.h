// The webhook's self-managed certificates (`hyperslice webhook --self-signed`): a CA and a serving
// certificate kept in one Secret (the source of truth shared by every replica), the serving pair
// written to the files the HTTPS server watches, and the CA bundle written into the
// clientConfig.caBundle of the webhook configurations. Renewal is automatic, like cert-manager's:
//
//  - the serving certificate is re-issued when less than 1/3 of `serving_lifetime` remains (or it
//    expired, or is missing);
//  - the CA is replaced when less than 1/3 of `ca_lifetime` remains, and when the Secret was
//  written
//    by an older version without `ca.key`. The replacement overlaps: the caBundle holds the new and
//    the previous CA; the serving certificate is re-issued by the new CA once every configuration's
//    caBundle trusts it and `propagation_delay` has passed since the new CA was minted; the
//    previous CA leaves the bundle `check_interval + propagation_delay` after that (every replica
//    has then loaded the new serving pair).
//
// Secret keys: ca.crt / ca.key (the signing CA), ca-previous.crt (during an overlap), tls.crt /
// tls.key (the serving pair); annotations record when the CA and the serving pair were issued and
// the bundle generation. Replicas agree through resourceVersion-preconditioned updates: a replica
// that loses the race re-reads and decides again. The configurations carry the bundle generation
// they were patched with, so a replica acting on a stale read never replaces a newer bundle.
//
// Thread-safety: Reconcile() is not reentrant; Start() runs it on its own thread.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "src/base/result.h"

namespace hyperslice::kube {
class Client;
}

namespace hyperslice::webhook {

inline constexpr char kCaIssuedAtAnnotation[] = "webhook.hyperslice.dev/ca-issued-at";
inline constexpr char kServingIssuedAtAnnotation[] = "webhook.hyperslice.dev/serving-issued-at";
inline constexpr char kBundleGenerationAnnotation[] = "webhook.hyperslice.dev/ca-bundle-generation";

struct SelfSignedOptions {
  std::string namespace_;
  std::string secret;
  std::string service_name;
  std::string cluster_domain = "cluster.local";
  std::vector<std::string> extra_sans;  // IP addresses or DNS names
  std::string mutating_config;          // MutatingWebhookConfiguration ("" = none)
  std::string validating_config;  // ValidatingWebhookConfigurations, comma-separated ("" = none)
  std::string cert_file;
  std::string key_file;
  std::chrono::seconds ca_lifetime = std::chrono::hours(24 * 3650);
  std::chrono::seconds serving_lifetime = std::chrono::hours(24 * 90);
  std::chrono::seconds check_interval = std::chrono::minutes(5);
  std::chrono::seconds propagation_delay = std::chrono::minutes(1);
};

class SelfSignedCertificates {
 public:
  virtual ~SelfSignedCertificates() = default;
  // Settles the Secret (creating it if absent), writes the serving pair and sets the caBundles,
  // then keeps doing so every check_interval on a thread of its own until destroyed. An error
  // here (unreadable or malformed Secret, missing configuration) is for the caller to exit on;
  // later errors are logged and retried at the next check.
  static Result<std::unique_ptr<SelfSignedCertificates>> Start(std::shared_ptr<kube::Client> client,
                                                               SelfSignedOptions options);
  // One step toward the desired state (what the thread runs).
  virtual Status Reconcile() = 0;
};

}  // namespace hyperslice::webhook
