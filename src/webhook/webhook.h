// The admission webhook of `hyperslice webhook` (ARCHITECTURE.md §6): an HTTPS server that
//  - mutates Pods on CREATE, injecting the libtpu environment (TPU_WORKER_ID, TPU_WORKER_HOSTNAMES
//    and the slice's topology variables) into the containers that need it, and
//  - validates TPUNodeGroups on CREATE/UPDATE beyond what the CRD schema and CEL can express
//    (topology x machine type x nodeCount, BULK for multi-host, template project), and
//  - validates tgp.io GPUNodePools and GPUNodeClasses on CREATE/UPDATE likewise (the pool's class
//    exists and its maxHourlyCost admits the pool's maxHourlyPrice, tgp.io/ requirements, the
//    class's machine config template: src/gpu/validation.h).
//
//  - for drop-in use with gke-tpu-env-injector's configuration (seed 001), also mutates
//    StatefulSets on CREATE/UPDATE, adding TPU_WORKER_HOSTNAMES to their pod template.
//
// Paths: POST /mutate-pods, POST /mutate (StatefulSets and Pods), POST /validate-tpunodegroups,
// POST /validate-tgp (GPUNodePools and GPUNodeClasses), POST /validate-sealed-pods (Pods for sealed
// control nodes: their WorkloadPolicy) (AdmissionReview admission.k8s.io/v1 or
// v1beta1, answered in the version asked; Content-Type application/json), GET /healthz, GET /readyz
// (and GET /, which upstream's chart probes), GET /metrics (Prometheus text).
//
// Order of the injected variables in a container's env: the container's own entries, then
// TPU_WORKER_HOSTNAMES, TPU_WORKER_ID, TPU_TOPOLOGY, TPU_ACCELERATOR_TYPE,
// TPU_CHIPS_PER_HOST_BOUNDS, TPU_HOST_BOUNDS (upstream's order for the first two).
//
// Opt-in and options, read from the Pod:
//   label  gke-tpu-env-injector.aaronbatilo.dev/inject: enabled   every container (seed 001)
//   label  hyperslice.dev/tpu-env: all | tpu | disabled           every container / containers
//                                                                 requesting google.com/tpu / none
//   (no label)                                                    containers requesting
//                                                                 google.com/tpu
//   annotation hyperslice.dev/tpu-worker-hostnames-fqdn: "true"   <pod>.<svc>.<ns>.svc.<domain>
//   annotation hyperslice.dev/tpu-worker-hostnames-port: "8471"   each hostname gets ":8471"
// A variable a container already sets in `env` is never changed or duplicated, so a second call
// (reinvocationPolicy: IfNeeded) yields an empty patch (one exception: on a StatefulSet UPDATE, a
// TPU_WORKER_HOSTNAMES equal to what the previous spec gave follows the new replicas/ordinals).
// Variables set only through `envFrom` cannot be seen at admission and are overridden by the
// injected value (`env` wins over `envFrom`); the response warns for each injected container that
// uses envFrom.
//
// Thread-safety: Server is thread-safe; ObjectSource implementations must be.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/json/object.hpp>

#include "src/base/result.h"
#include "src/kube/resource.h"

namespace hyperslice::kube {
class Client;
}
namespace hyperslice::runners::policy {
class SignatureSource;
}

namespace hyperslice::webhook {

inline constexpr char kCompatInjectLabel[] = "gke-tpu-env-injector.aaronbatilo.dev/inject";
inline constexpr char kInjectLabel[] = "hyperslice.dev/tpu-env";
inline constexpr char kFqdnAnnotation[] = "hyperslice.dev/tpu-worker-hostnames-fqdn";
inline constexpr char kPortAnnotation[] = "hyperslice.dev/tpu-worker-hostnames-port";
inline constexpr char kNodeGroupLabel[] = "cloud.google.com/tpu-node-group";
inline constexpr char kTpuResource[] = "google.com/tpu";

inline constexpr char kMutatePodsPath[] = "/mutate-pods";
// gke-tpu-env-injector's path (seed 001): StatefulSets (TPU_WORKER_HOSTNAMES into the template) and
// Pods (the Pod injection of kMutatePodsPath) on the one path its chart's configuration names.
inline constexpr char kMutatePath[] = "/mutate";
inline constexpr char kValidateNodeGroupsPath[] = "/validate-tpunodegroups";
inline constexpr char kValidateTgpPath[] = "/validate-tgp";
// Pods that may land on a sealed control node (issue 21): their WorkloadPolicy
// (src/runners/policy; sealed_pods.cc says how such pods are recognised).
inline constexpr char kValidateSealedPodsPath[] = "/validate-sealed-pods";

// tpunodegroups.v1alpha1.tpu.google.com
const kube::Resource& TPUNodeGroups();

using ObjectPtr = std::shared_ptr<const boost::json::object>;

// How the webhook reads the objects a decision depends on (StatefulSets, Jobs, TPUNodeGroups,
// GPUNodeClasses, GPUNodePools). kCachedOnly must not block: it answers from memory or fails with
// reason kNotCached. kLive reads the current state (may block on the network; never called on an
// I/O thread). Errors: kNotFound when the object does not exist; anything else means it could not
// be read.
class ObjectSource {
 public:
  enum class Mode { kCachedOnly, kLive };
  static constexpr const char* kNotCached = "NotCached";
  virtual ~ObjectSource() = default;
  virtual Result<ObjectPtr> Get(const kube::Resource& r, const std::string& ns,
                                const std::string& name, Mode mode) = 0;
  // Every object of `r` in all namespaces. The default knows none: kNotCached for kCachedOnly,
  // kInternal for kLive.
  virtual Result<std::vector<ObjectPtr>> List(const kube::Resource& r, Mode mode);
};

// Every read is a GET on the apiserver (no cache: kCachedOnly always fails with kNotCached).
std::shared_ptr<ObjectSource> NewApiObjectSource(std::shared_ptr<kube::Client> client);

// Shared informers over StatefulSets, Jobs and TPUNodeGroups of all namespaces (list+watch), so the
// hot path reads memory; a miss or a stale copy falls back to a live GET. Waits up to
// `sync_timeout` for the first lists (an unsynced cache only means live reads). GPUNodeClasses and
// GPUNodePools are watched too, without waiting for them: their admissions are rare and read live
// until their caches sync (and where tgp.io is not installed, they never block the start).
std::shared_ptr<ObjectSource> NewInformerObjectSource(const std::shared_ptr<kube::Client>& client,
                                                      std::chrono::milliseconds sync_timeout);

// Fixed objects held in memory; both modes answer from them. For benchmarks and unit tests.
class StaticObjectSource : public ObjectSource {
 public:
  void Put(const kube::Resource& r, boost::json::object obj);
  Result<ObjectPtr> Get(const kube::Resource& r, const std::string& ns, const std::string& name,
                        Mode mode) override;
  Result<std::vector<ObjectPtr>> List(const kube::Resource& r, Mode mode) override;

 private:
  std::map<std::string, ObjectPtr> objects_;  // written before use only
};

// What to do when a Pod that is ours to mutate depends on an object that cannot be read (API
// error, not found, UID mismatch, ordinal out of range): kDeny answers a clear denial (the
// StatefulSet/Job controller retries the create); kAllow admits the Pod unchanged with a warning.
enum class OwnerUnreadable { kDeny, kAllow };
Result<OwnerUnreadable> ParseOwnerUnreadable(const std::string& s);

struct AdmissionOptions {
  OwnerUnreadable owner_unreadable = OwnerUnreadable::kDeny;
  std::string cluster_domain = "cluster.local";
  // Where sealed control nodes' image signatures are read; null: registries over HTTPS with the
  // system's trust.
  std::shared_ptr<runners::policy::SignatureSource> signatures;
};

// The outcome of one AdmissionReview: an HTTP status and body (an AdmissionReview response for
// 200, a plain-text reason otherwise), plus facts for metrics.
struct ReviewResult {
  int http_status = 200;
  std::string content_type = "application/json";
  std::string body;
  bool allowed = true;
  bool patched = false;
  std::string reason;  // denial reason (metrics label), "" when allowed
  // The decision needs a kLive read: run again off the I/O thread with allow_live=true.
  bool needs_live = false;
};

// Decides one AdmissionReview body received on `path`. Never throws.
ReviewResult Review(const std::string& path, std::string_view body, ObjectSource& source,
                    const AdmissionOptions& options, bool allow_live);

struct ServerOptions {
  std::string address = "127.0.0.1";
  uint16_t port = 0;
  int io_threads = 2;
  int blocking_threads = 4;  // run admissions that need live API reads
  std::string tls_cert_file;
  std::string tls_key_file;
  size_t max_body_bytes = size_t{3} * 1024 * 1024;  // the apiserver's own request limit is 3 MiB
  AdmissionOptions admission;
  std::shared_ptr<ObjectSource> source;
};

class Server {
 public:
  virtual ~Server() = default;
  // Binds and serves; TLS is mandatory (the key pair is re-read when its files change).
  static Result<std::unique_ptr<Server>> Start(ServerOptions options);
  virtual uint16_t port() const = 0;
  virtual int tls_generation() const = 0;
  // Stops accepting, waits up to `grace` for in-flight admissions, then closes. Idempotent.
  virtual void Stop(std::chrono::milliseconds grace = std::chrono::milliseconds(5000)) = 0;
  // The /metrics body.
  virtual std::string Metrics() const = 0;
};

// Registers the admission configurations of `file` (deploy/webhook/base/webhooks.yaml) with the
// apiserver for a webhook served at `base_url` ("https://127.0.0.1:<port>"): each webhook's
// clientConfig becomes {url: base_url + its service path, caBundle: ca_pem}; rules, selectors,
// match conditions and failure policies stay as shipped. Server-side apply, so it is idempotent.
// For `hyperslice dev` and tests, where the webhook is not behind the in-cluster Service.
Status RegisterConfigurations(kube::Client& client, const std::string& file,
                              const std::string& base_url, const std::string& ca_pem);

}  // namespace hyperslice::webhook
