// ResourcePolicy → one regional GCE resourcePolicy (a workload policy). GCE cannot change a
// resource policy in place: drift is reported, never corrected. Resource policies carry no
// labels, so the owner marker lives in the description.
#include <boost/json.hpp>

#include "src/base/json.h"
#include "src/tpu/api.h"
#include "src/tpu/internal/gce_child.h"

namespace hyperslice::tpu::internal {

using jsonfield::ObjectField;
using jsonfield::StringValue;

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
    return compute.GetResourcePolicy(StringValue(spec, "project"), StringValue(spec, "region"),
                                     StringValue(spec, "name"));
  }

  Result<gce::Operation> Insert(gce::Compute& compute, const json::object& spec,
                                const GceOwner& owner) const override {
    json::object body{
        {"name", StringValue(spec, "name")},
        {"description", DescriptionWithOwner(StringValue(spec, "description"), owner)},
        {"workloadPolicy", *ObjectField(spec, "workloadPolicy")}};
    return compute.InsertResourcePolicy(StringValue(spec, "project"), StringValue(spec, "region"),
                                        body);
  }

  Result<gce::Operation> Delete(gce::Compute& compute, const json::object& spec) const override {
    return compute.DeleteResourcePolicy(StringValue(spec, "project"), StringValue(spec, "region"),
                                        StringValue(spec, "name"));
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
