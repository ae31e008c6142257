// LocalCluster: a real control plane on loopback — etcd, kube-apiserver and (on request)
// kube-controller-manager — built from pinned Go modules by scripts/build-controlplane.sh.
// Used by the test fixture (test/testenv) and by `hyperslice dev`.
//
// What it sets up: a generated CA and serving/client certificates, RBAC + Node authorization,
// bootstrap-token authentication, service-account signing keys, an admin identity (client cert
// in system:masters) written to a kubeconfig, and the apiserver's kubelet client certificate
// (--kubelet-client-certificate, CN kube-apiserver-kubelet-client, signed by the cluster CA that
// is also its client CA). Every process is started with PR_SET_PDEATHSIG so
// nothing outlives the owner even after kill -9, and in its own process group.
//
// Thread-safety: methods are not concurrent with each other; the cluster may be used (through
// clients) from any thread while it runs.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "src/base/result.h"
#include "src/kube/config.h"

namespace hyperslice::localcluster {

struct Options {
  // Folder with kube-apiserver, kube-controller-manager and etcd. Empty:
  // $HYPERSLICE_CONTROLPLANE_BIN, else the output of scripts/build-controlplane.sh (which builds on
  // first use).
  std::string bin_dir;
  // Working folder for certificates, etcd data and logs. Empty: a new temp folder, removed on
  // destruction unless $HYPERSLICE_KEEP_TESTENV is set. A given folder is kept, but every Start()
  // regenerates its certificates and wipes its etcd data (each start is a fresh cluster).
  // Logs: <work_dir>/{etcd,kube-apiserver,kube-controller-manager,kube-scheduler}.log.
  std::string work_dir;
  // GC, CSR approval and signing, token cleaner, service accounts. Without it the ServiceAccount
  // admission plugin is disabled (nobody would create a namespace's "default" ServiceAccount, so
  // every pod would be rejected), as envtest does.
  bool controller_manager = false;
  // kube-scheduler (same pinned release, leader election off), so pods get bound to Nodes.
  bool scheduler = false;
  bool watch_cache = true;  // false: watches go to etcd, so compaction yields 410 Gone
  std::vector<std::string> extra_apiserver_flags;
  // What `kubeadm init` leaves in a cluster for nodes to join with a bootstrap token:
  // ClusterRoleBindings kubeadm:kubelet-bootstrap (system:node-bootstrapper) and
  // kubeadm:node-autoapprove-bootstrap (…:certificatesigningrequests:nodeclient) for the group
  // system:bootstrappers:kubeadm:default-node-token, kubeadm:node-autoapprove-certificate-rotation
  // (…:selfnodeclient) for system:nodes, kubeadm:get-nodes (ClusterRole and binding); the
  // kube-public/cluster-info ConfigMap (kubeconfig: server + CA) readable by system:anonymous
  // through the Role/RoleBinding kubeadm:bootstrap-signer-clusterinfo; and the NodeRestriction
  // admission plugin. With controller_manager, its bootstrapsigner signs cluster-info per token
  // and its CSR controllers approve and sign kubelet client certificates.
  bool kubeadm_bootstrap = false;
  // Appended to kube-controller-manager's flags (e.g. "--node-monitor-grace-period=8s").
  std::vector<std::string> extra_controller_manager_flags;
  // The apiserver's audit log: every request at the Metadata level (user, groups, user agent,
  // source IPs, verb, URI, response code; no bodies) as JSON lines in
  // <work_dir>/audit/audit.log (audit_log_path()), with the policy in
  // <work_dir>/audit/policy.yaml. For tests that must prove who talked to the apiserver. Off by
  // default: auditing every request costs the apiserver time and disk.
  bool audit_log = false;
};

class LocalCluster {
 public:
  virtual ~LocalCluster() = default;  // stops every process

  static Result<std::unique_ptr<LocalCluster>> Start(Options options);

  virtual const std::string& server_url() const = 0;       // https://127.0.0.1:<port>
  virtual const std::string& kubeconfig_path() const = 0;  // admin kubeconfig
  virtual const std::string& ca_cert_path() const = 0;     // cluster CA (PEM)
  virtual const std::string& ca_key_path() const = 0;      // cluster CA key (signs node certs)
  virtual const std::string& work_dir() const = 0;
  virtual const std::string& etcd_url() const = 0;  // http://127.0.0.1:<port> (plain, loopback)
  // The apiserver's audit log (JSON lines, one audit.k8s.io/v1 Event each); empty unless
  // Options::audit_log. Written synchronously by the request's handler
  // (--audit-log-mode=blocking), so a request's event is in the file once its response arrived.
  virtual const std::string& audit_log_path() const = 0;
  virtual kube::Config AdminConfig() const = 0;

  // Stops kube-apiserver (SIGTERM, then SIGKILL after a grace period) and starts it again on the
  // same port with the same flags; returns once /readyz answers ok.
  virtual Status RestartApiserver() = 0;
  virtual Status StopApiserver() = 0;
  virtual Status StartApiserver() = 0;
  // Compacts etcd's history up to its current revision.
  virtual Status CompactEtcd() = 0;
  // PIDs of the processes it runs (for tests that check nothing is left behind).
  virtual std::vector<int> Pids() const = 0;
};

}  // namespace hyperslice::localcluster
