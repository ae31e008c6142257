// Bootstrap (internal/nodegroup_phases.h): a join token and the join values in the metadata of
// every RUNNING VM whose Node has not joined, removed once it has (the pull model of
// bootstrap.h). The cluster CA's hash is read once; the Bootstrapper is built on first use.
#include <chrono>
#include <utility>

#include "src/base/json.h"
#include "src/kube/client.h"
#include "src/kube/config.h"
#include "src/tpu/internal/nodegroup_phases.h"

namespace hyperslice::tpu::internal {

using jsonfield::ObjectField;
using jsonfield::StringValue;

namespace {

bool NotImplemented(const Error& e) { return e.reason == "NotImplemented"; }

}  // namespace

std::string ChooseClusterCa(const std::string& flag_pem, const kube::Object* cluster_info,
                            const std::string& client_pem) {
  if (!flag_pem.empty()) return flag_pem;
  const auto* data = cluster_info ? ObjectField(*cluster_info, "data") : nullptr;
  const std::string kubeconfig = data ? StringValue(*data, "kubeconfig") : "";
  if (!kubeconfig.empty()) {
    auto cfg = kube::ParseKubeconfig(kubeconfig, "/");
    if (cfg.ok() && !cfg->tls.ca_pem.empty()) return cfg->tls.ca_pem;
    // kubeadm's cluster-info has one unnamed cluster and no context.
    auto sole = kube::SoleClusterCa(kubeconfig);
    if (sole.ok()) return *sole;
  }
  return client_pem;
}

std::optional<Clock::Duration> BootstrapRecheck(const BootstrapReport& report) {
  if (report.waiting.empty()) return std::nullopt;
  return std::chrono::minutes(10);
}

GroupBootstrap::GroupBootstrap(OperatorOptions options) : options_(std::move(options)) {}

std::optional<Clock::Duration> GroupBootstrap::Run(GroupCtx& ctx, const NodesObservation& nodes) {
  if (!ctx.spec->BootstrapEnabled() || nodes.instances.empty()) return std::nullopt;
  auto hash = CaHash();
  if (!hash.ok()) {
    ctx.errors.push_back("bootstrap: " + hash.error().message);
    return std::nullopt;
  }
  std::shared_ptr<Bootstrapper> bootstrapper;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!bootstrapper_) {
      BootstrapOptions bo;
      bo.ca_hash = *hash;
      bo.clock = options_.clock;
      bootstrapper_ = std::make_shared<Bootstrapper>(options_.client, options_.compute, bo);
    }
    bootstrapper = bootstrapper_;
  }
  auto report = bootstrapper->Reconcile(ctx.group, nodes.instances, nodes.joined);
  if (!report.ok()) {
    if (!NotImplemented(report.error())) {
      ctx.errors.push_back("bootstrap: " + report.error().message);
    }
    return std::nullopt;
  }
  return BootstrapRecheck(*report);
}

Status GroupBootstrap::Cleanup(const kube::Object& group) const {
  BootstrapOptions bo;
  bo.clock = options_.clock;
  Bootstrapper cleaner(options_.client, options_.compute, bo);
  Status cleaned = cleaner.Cleanup(group);
  if (!cleaned.ok() && !NotImplemented(cleaned.error())) return cleaned.error();
  return OkStatus();
}

Result<std::string> GroupBootstrap::CaHash() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!ca_hash_.empty()) return ca_hash_;
  }
  std::string pem = options_.cluster_ca_pem;
  if (pem.empty()) {
    // Read only when the flag gives none.
    auto info = options_.client->Get(kube::resources::ConfigMaps(), "kube-public", "cluster-info");
    pem = ChooseClusterCa("", info.ok() ? &*info : nullptr, options_.client->config().tls.ca_pem);
  }
  if (pem.empty()) {
    return Error::Make(Error::Code::kNotFound,
                       "no cluster CA: pass --cluster-ca-file, or publish kube-public/cluster-info",
                       "NoClusterCA");
  }
  HS_ASSIGN_OR_RETURN(std::string hash, CaCertHash(pem));
  std::lock_guard<std::mutex> lock(mu_);
  ca_hash_ = hash;
  return hash;
}

}  // namespace hyperslice::tpu::internal
