// Set-up shared by the tests of the ephemeral-GPU controllers (src/gpu): the tgp.io CRDs from a
// deploy/ folder, and a provider-credentials Secret where seed 002 puts it. Header-only, so
// hs_testenv itself does not depend on hs_gpu.
#pragma once

#include <map>
#include <string>

#include <boost/json.hpp>

#include "src/gpu/api.h"
#include "src/kube/client.h"
#include "test/testenv/crds.h"

namespace hyperslice::testenv {

// Installs deploy/crds/tgp.io_{gpunodeclasses,gpunodepools,gpunodeclaims}.yaml and waits until
// they are served.
inline Status InstallTgpCrds(const std::string& deploy_dir) {
  return InstallCrds({deploy_dir + "/crds/tgp.io_gpunodeclasses.yaml",
                      deploy_dir + "/crds/tgp.io_gpunodepools.yaml",
                      deploy_dir + "/crds/tgp.io_gpunodeclaims.yaml"},
                     {gpu::GPUNodeClasses(), gpu::GPUNodePools(), gpu::GPUNodeClaims()});
}

// Creates namespace `ns` (if missing) and Secret `name` there with `string_data`; an existing
// Secret of that name is replaced.
inline Status PutSecret(kube::Client& client, const std::string& ns, const std::string& name,
                        const std::map<std::string, std::string>& string_data) {
  namespace bj = boost::json;
  auto created_ns = client.Create(
      kube::resources::Namespaces(), "",
      bj::object{{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", ns}}}});
  if (!created_ns.ok() && created_ns.error().code != Error::Code::kAlreadyExists) {
    return created_ns.error();
  }
  bj::object data;
  for (const auto& [k, v] : string_data) data[k] = v;
  bj::object secret{{"apiVersion", "v1"},
                    {"kind", "Secret"},
                    {"metadata", {{"name", name}, {"namespace", ns}}},
                    {"stringData", std::move(data)}};
  (void)client.Delete(kube::resources::Secrets(), ns, name);
  auto created = client.Create(kube::resources::Secrets(), ns, secret);
  if (!created.ok()) return created.error();
  return OkStatus();
}

}  // namespace hyperslice::testenv
