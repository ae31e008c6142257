// Pull-model bootstrap of a TPUNodeGroup's VMs (ARCHITECTURE.md §5, seed 000): per RUNNING VM a
// kubeadm bootstrap token Secret and the join values in that VM's metadata; both removed once the
// VM's Node has joined. Called by the TPUNodeGroup reconciler; level-based and idempotent.
// Thread-safe (state lives in the apiserver and GCE).
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "src/base/clock.h"
#include "src/base/result.h"
#include "src/kube/resource.h"

namespace hyperslice::kube {
class Client;
}
namespace hyperslice::gce {
class Compute;
}

namespace hyperslice::tpu::internal {

// One VM of a group as the ManagedInstanceGroup child reports it.
struct InstanceState {
  std::string project, zone, name;
  std::string instance_status;  // GCE instanceStatus: PROVISIONING, STAGING, RUNNING, ...
  std::string provider_id;      // gce://project/zone/name
};

struct BootstrapOptions {
  std::string ca_hash;  // "sha256:<hex>" of the cluster CA (CaCertHash)
  Clock::Duration token_ttl = std::chrono::hours(1);
  // A token with less than this left is replaced (a VM must have time to use it).
  Clock::Duration token_min_remaining = std::chrono::minutes(15);
  Clock* clock = nullptr;
};

struct BootstrapReport {
  int tokens_created = 0;
  int tokens_deleted = 0;
  int metadata_written = 0;
  int metadata_cleared = 0;
  std::vector<std::string> waiting;  // instances RUNNING and given a token, Node not joined yet
};

class Bootstrapper {
 public:
  Bootstrapper(std::shared_ptr<kube::Client> client, std::shared_ptr<gce::Compute> compute,
               BootstrapOptions options);
  // `group` is the TPUNodeGroup (needs metadata.uid, spec.bootstrapKubernetes). For each
  // RUNNING instance whose provider id is not in `joined`: a valid token Secret exists and the
  // instance metadata holds kubeadm-join-token, kubeadm-ca-hash, kubeadm-control-plane-ip. For
  // each instance in `joined`, and for tokens of instances no longer listed: Secret deleted and
  // the kubeadm-* keys removed from the metadata (when the instance still exists).
  Result<BootstrapReport> Reconcile(const kube::Object& group,
                                    const std::vector<InstanceState>& instances,
                                    const std::set<std::string>& joined);
  // Teardown: deletes every token Secret of the group (by kSecretLabelGroupUid).
  Status Cleanup(const kube::Object& group);

 private:
  std::shared_ptr<kube::Client> client_;
  std::shared_ptr<gce::Compute> compute_;
  BootstrapOptions options_;
  // Token expirations are wall-clock times that follow options_.clock, so a test clock moves
  // them as it is advanced.
  WallClock wall_;
};

// The join values in a VM's metadata (kubeadm-join-token, kubeadm-ca-hash,
// kubeadm-control-plane-ip): one read-modify-write, its operation waited for up to `wait`.
// `changed`: a write was made; `settled`: the metadata is known to be as wanted (false while the
// operation still runs; the next reconcile re-reads the VM). A VM that is gone is kNotFound.
struct MetadataWrite {
  bool changed = false;
  bool settled = true;
};
// Sets the keys of `values` that differ (no call when none does); other keys are kept.
Result<MetadataWrite> WriteJoinValues(gce::Compute& compute, const std::string& project,
                                      const std::string& zone, const std::string& name,
                                      const std::map<std::string, std::string>& values,
                                      Clock::Duration wait);
// Removes the three join keys (no call when none is there); other keys are kept.
Result<MetadataWrite> ClearJoinValues(gce::Compute& compute, const std::string& project,
                                      const std::string& zone, const std::string& name,
                                      Clock::Duration wait);

// "sha256:" + hex SHA-256 of the DER SubjectPublicKeyInfo of the first certificate in `ca_pem`
// (kubeadm's --discovery-token-ca-cert-hash).
Result<std::string> CaCertHash(std::string_view ca_pem);

// The startup-script metadata value: the bash script a real GCE VM runs to install containerd,
// kubeadm and kubelet for `kubernetes_version`, poll its metadata for the join values and join.
std::string StartupScript(std::string_view kubernetes_version);

}  // namespace hyperslice::tpu::internal
