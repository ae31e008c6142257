#include "test/testenv/crds.h"

#include <utility>

#include <yaml-cpp/yaml.h>

#include "src/kube/client.h"
#include "src/kube/yaml.h"
#include "test/testenv/eventually.h"
#include "test/testenv/testenv.h"

namespace hyperslice::testenv {

Status InstallCrds(const std::vector<std::string>& files,
                   const std::vector<kube::Resource>& served) {
  auto client = AdminClient();
  if (!client) return Error::Make(Error::Code::kInternal, "no admin client");
  return InstallCrds(*client, files, served);
}

Status InstallCrds(kube::Client& client, const std::vector<std::string>& files,
                   const std::vector<kube::Resource>& served) {
  for (const std::string& file : files) {
    boost::json::value crd;
    try {
      crd = kube::YamlToJson(YAML::LoadFile(file));
    } catch (const std::exception& e) {
      return Error::Make(Error::Code::kInvalidArgument, file + ": " + e.what());
    }
    if (!crd.is_object()) return Error::Make(Error::Code::kInvalidArgument, file + ": not a map");
    auto created = client.Create(kube::resources::CustomResourceDefinitions(), "", crd.as_object());
    if (!created.ok() && created.error().code != Error::Code::kAlreadyExists) {
      return Error::Make(created.error().code, file + ": " + created.error().ToString());
    }
  }
  for (const kube::Resource& r : served) {
    if (!Eventually([&] { return client.List(r, "").ok(); }, std::chrono::seconds(60))) {
      return Error::Make(Error::Code::kTimeout, r.resource + " not served within 60 s");
    }
  }
  return OkStatus();
}

Status InstallTpuCrds(const std::string& deploy_dir) {
  std::vector<std::string> files;
  std::vector<kube::Resource> served;
  for (auto [plural, kind] : std::vector<std::pair<std::string, std::string>>{
           {"tpunodegroups", "TPUNodeGroup"},
           {"resourcepolicies", "ResourcePolicy"},
           {"instancetemplates", "InstanceTemplate"},
           {"managedinstancegroups", "ManagedInstanceGroup"}}) {
    std::string file = deploy_dir;
    file += "/crds/tpu.google.com_";
    file += plural;
    file += ".yaml";
    files.push_back(std::move(file));
    served.push_back(kube::Resource{"tpu.google.com", "v1alpha1", plural, kind, true});
  }
  return InstallCrds(files, served);
}

}  // namespace hyperslice::testenv
