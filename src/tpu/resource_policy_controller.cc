// ResourcePolicy → one regional GCE resourcePolicy (a workload policy). GCE cannot change a
// resource policy in place: drift is reported, never corrected. Resource policies carry no
// labels, so the owner marker lives in the description.
#include <boost/json.hpp>

#include "src/tpu/api.h"
#include "src/tpu/internal/gce_child.h"

namespace hyperslice::tpu::internal {
namespace {

namespace json = boost::json;

class ResourcePolicyKind final : public GceChildKind {
 public:
  const kube::Resource& resource() const override { return ResourcePolicies(); }
  std::string GceKind() const override { return "resourcePolicy"; }

  Status Validate(const json::object& spec) const override {
    return RequireSpecFields(spec, {"project", "region", "name"}, {"workloadPolicy"});
  }

  Result<json::object> Get(gce::Compute& compute, const json::object& spec) const override {
    return compute.GetResourcePolicy(StringAt(spec, "project"), StringAt(spec, "region"),
                                     StringAt(spec, "name"));
  }

  Result<gce::Operation> Insert(gce::Compute& compute, const json::object& spec,
                                const GceOwner& owner) const override {
    json::object body{{"name", StringAt(spec, "name")},
                      {"description", DescriptionWithOwner(StringAt(spec, "description"), owner)},
                      {"workloadPolicy", *ObjectAt(spec, "workloadPolicy")}};
    return compute.InsertResourcePolicy(StringAt(spec, "project"), StringAt(spec, "region"), body);
  }

  Result<gce::Operation> Delete(gce::Compute& compute, const json::object& spec) const override {
    return compute.DeleteResourcePolicy(StringAt(spec, "project"), StringAt(spec, "region"),
                                        StringAt(spec, "name"));
  }

  std::vector<std::string> Drift(const json::object& spec,
                                 const json::object& resource) const override {
    std::vector<std::string> out;
    FieldDifferences(spec, resource, "workloadPolicy", out);  // required by Validate
    return out;
  }
};

}  // namespace

std::unique_ptr<GceChildKind> NewResourcePolicyKind() {
  return std::make_unique<ResourcePolicyKind>();
}

}  // namespace hyperslice::tpu::internal
