// SCAFFOLD (session 2): replaced by the bootstrap engineer; keeps the parent linkable meanwhile.
#include "src/tpu/internal/bootstrap.h"

namespace hyperslice::tpu::internal {

Bootstrapper::Bootstrapper(std::shared_ptr<kube::Client> client,
                           std::shared_ptr<gce::Compute> compute, BootstrapOptions options)
    : client_(std::move(client)), compute_(std::move(compute)), options_(std::move(options)) {}

Result<BootstrapReport> Bootstrapper::Reconcile(const kube::Object& /*group*/,
                                                const std::vector<InstanceState>& /*instances*/,
                                                const std::set<std::string>& /*joined*/) {
  return Error::Make(Error::Code::kInternal, "bootstrap not implemented yet", "NotImplemented");
}

Status Bootstrapper::Cleanup(const kube::Object& /*group*/) {
  return Error::Make(Error::Code::kInternal, "bootstrap not implemented yet", "NotImplemented");
}

Result<std::string> CaCertHash(std::string_view /*ca_pem*/) {
  return Error::Make(Error::Code::kInternal, "not implemented yet", "NotImplemented");
}

std::string StartupScript(std::string_view /*kubernetes_version*/) { return ""; }

}  // namespace hyperslice::tpu::internal
