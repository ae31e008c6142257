// InstanceTemplate → one global GCE instanceTemplate. Templates are immutable in GCE (and the
// CRD makes the spec immutable too): drift is reported, never corrected. The owner labels go on
// properties.labels (so every VM made from the template carries them) and the owner marker in
// the description.
#include <boost/json.hpp>

#include "src/base/json.h"
#include "src/tpu/api.h"
#include "src/tpu/internal/gce_child.h"

namespace hyperslice::tpu::internal {

using jsonfield::ObjectField;
using jsonfield::StringValue;

namespace {

namespace json = boost::json;

class InstanceTemplateKind final : public GceChildKind {
 public:
  const kube::Resource& resource() const override { return InstanceTemplates(); }
  std::string GceKind() const override { return "instanceTemplate"; }

  Status Validate(const json::object& spec) const override {
    return RequireSpecFields(spec, {"project", "name"}, {"properties"});
  }

  Result<json::object> Get(gce::Compute& compute, const json::object& spec) const override {
    return compute.GetInstanceTemplate(StringValue(spec, "project"), StringValue(spec, "name"));
  }

  Result<gce::Operation> Insert(gce::Compute& compute, const json::object& spec,
                                const GceOwner& owner) const override {
    json::object properties = *ObjectField(spec, "properties");
    json::object labels;
    if (const auto* l = ObjectField(properties, "labels")) labels = *l;
    for (const auto& [k, v] : OwnerLabels(owner)) labels[k] = v;
    properties["labels"] = std::move(labels);
    json::object body{
        {"name", StringValue(spec, "name")},
        {"description", DescriptionWithOwner(StringValue(spec, "description"), owner)},
        {"properties", std::move(properties)}};
    return compute.InsertInstanceTemplate(StringValue(spec, "project"), body);
  }

  Result<gce::Operation> Delete(gce::Compute& compute, const json::object& spec) const override {
    return compute.DeleteInstanceTemplate(StringValue(spec, "project"), StringValue(spec, "name"));
  }

  OwnerMarks OwnerOf(const json::object& resource) const override {
    OwnerMarks marks;
    if (const auto* p = ObjectField(resource, "properties")) {
      if (const auto* l = ObjectField(*p, "labels")) marks = OwnerMarksFromLabels(*l);
    }
    OwnerMarks described = OwnerMarksFromDescription(StringValue(resource, "description"));
    if (marks.uid.empty()) marks.uid = described.uid;
    if (marks.cluster.empty()) marks.cluster = described.cluster;
    return marks;
  }

  std::vector<std::string> Drift(const json::object& spec,
                                 const json::object& resource) const override {
    std::vector<std::string> out;
    FieldDifferences(spec, resource, "properties", out);  // required by Validate
    return out;
  }
};

}  // namespace

std::unique_ptr<GceChildKind> NewInstanceTemplateKind() {
  return std::make_unique<InstanceTemplateKind>();
}

}  // namespace hyperslice::tpu::internal
