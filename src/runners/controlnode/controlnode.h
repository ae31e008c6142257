// Control nodes for linked runners (issue 20, ARCHITECTURE.md §9): the operator's side.
//
// RegisterOperator() adds to a leader-elected kube::Manager:
//  - the ControlNode controller: registers one Node per ControlNode (labels, the
//    runners.hyperslice.dev/control-node:NoSchedule taint, capacity/allocatable = the sum over its
//    healthy linked runners minus capacityPolicy.reserved, kubelet-style conditions, addresses,
//    daemonEndpoints), renews its Lease in kube-node-lease, writes the ControlNode's status, and
//    deletes Node and Lease (finalizer) when the ControlNode goes;
//  - the Runner controller: validates the spec, mints the one-time join token Secret
//    (join_tokens.h) for a runner that never linked, creates the instance of a spec.gce runner
//    (gce_runner.h; deleted through a finalizer), keeps an AgentLink (agent_link.h) to each
//    runner its control node selects, and writes the Runner's phase, identity, capacity, health
//    and conditions;
//  - the pod controller: for each pod bound to a control node's Node, chooses runners
//    (placement.h), resolves its inputs (pod_request.h), calls RunPod, reports the agent's status
//    back as a kubelet does, finishes deletions, refuses what it cannot run (Failed, condition
//    runners.hyperslice.dev/Refused, Warning Event), fails the pods of a runner lost for longer
//    than unhealthy_after (reason RunnerLost) and deletes on agents what the API no longer has.
// src/runners/README.md documents the API and the behaviour.
//
// Thread-safety: RegisterOperator before mgr.Run(); ControlNodeSet methods from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "src/base/result.h"
#include "src/runners/agent.grpc.pb.h"
#include "src/runners/attest/attest.h"
#include "src/runners/controlnode/agent_link.h"
#include "src/runners/controlnode/gce_runner.h"
#include "src/runners/controlnode/join_tokens.h"
#include "src/runners/controlnode/market_runner.h"
#include "src/runners/registry/registry.h"

namespace hyperslice::kube {
class Client;
class Manager;
}  // namespace hyperslice::kube

namespace hyperslice::runners::controlnode {

struct OperatorOptions {
  std::shared_ptr<kube::Client> client;  // required
  std::string ns;                        // required: the operator's namespace (join-token Secrets)
  // Required: the credentials the control node presents to agents (client certificate from the
  // runners CA + the CA that verifies agents; insecure in tests against a test double).
  AgentCredentials agent_credentials;
  // TLS: check that the agent's certificate names the Runner (its address may be an IP).
  bool verify_runner_name = true;
  std::chrono::milliseconds probe_interval{10000};   // Info per runner
  std::chrono::milliseconds unhealthy_after{40000};  // silence before a runner is Unhealthy
  std::chrono::milliseconds lease_renew_interval{10000};
  std::chrono::milliseconds node_status_interval{60000};  // Node status heartbeat when unchanged
  int lease_duration_seconds = 40;
  std::chrono::seconds join_token_ttl{std::chrono::hours(24)};
  int workers = 4;
  // Sealed runners: signs workloads' attestation tokens (absent: tokens are refused). The
  // operator serves its JWKS and OIDC discovery document (servers.h).
  std::shared_ptr<attest::TokenIssuer> token_issuer;
  std::chrono::milliseconds rpc_timeout{30000};  // enrolment and quotes (at most 30 s)
  // Runners with spec.gce: their instances are created and deleted through this (gce_runner.h).
  GceProvisionerOptions gce;
  // Runners with spec.marketplace: their machines are rented and returned through this
  // (market_runner.h).
  MarketProvisionerOptions market;
  std::string kubelet_version = "v1.36.3-hyperslice";
  // How a sealed control node reads images' cosign signatures (its WorkloadPolicy's check).
  registry::RegistryOptions registry;
};

// What the kubelet API (src/runners/kubeletapi) and the link protocol need from the running
// control nodes.
class ControlNodeSet {
 public:
  virtual ~ControlNodeSet() = default;

  struct PodTarget {
    std::string runner;
    std::string uid;
    std::shared_ptr<v1::RunnerAgent::StubInterface> stub;  // on the control node's mTLS channel
  };
  // The runner a pod on `node` runs on (the first host of a slice pod) and a stub to its agent,
  // for containerLogs/exec. kNotFound when the pod is not on that node or not placed yet;
  // kUnavailable when its runner is not linked.
  virtual Result<PodTarget> AgentForPod(const std::string& node, const std::string& ns,
                                        const std::string& name) = 0;
  // The join tokens (the link controller's JoinTokenStore).
  virtual std::shared_ptr<SecretJoinTokens> join_tokens() = 0;
  // Whether `node` is a sealed control node's and what its WorkloadPolicy lets an administrator
  // read. A sealed node whose policy cannot be read allows nothing (fail closed).
  struct Sealing {
    bool sealed = false;
    std::string control_node;
    std::string policy;
    bool allow_logs = false;
  };
  virtual Sealing SealingOf(const std::string& node) = 0;

  // Sealed runners: a workload's attestation token (link::LinkServer::Options::attestation_tokens).
  // A fresh appraisal of the runner bound to the request, the pod placed on that runner, its
  // container's measured image digest equal to the pod's; kForbidden with reason
  // sealed::kReasonAttestationRefused otherwise.
  virtual Result<std::string> IssueAttestationToken(const link::AttestationTokenRequest& r) = 0;
  // Node names of the registered control nodes (the kubelet API's serving certificate names).
  virtual std::vector<std::string> NodeNames() = 0;
  // The link server issued `runner` an identity for `agent_address`: for a runner the operator
  // placed (spec.gce, spec.marketplace) this is the address control nodes dial
  // (status.address); a spec.host runner keeps its spec's address.
  virtual Status AgentLinked(const std::string& runner, const std::string& agent_address) = 0;
};

// Errors: kInvalidArgument for missing options.
Result<std::shared_ptr<ControlNodeSet>> RegisterOperator(kube::Manager& mgr,
                                                         OperatorOptions options);

}  // namespace hyperslice::runners::controlnode
