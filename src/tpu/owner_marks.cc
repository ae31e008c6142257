// Owner marks on GCE resources (internal/owner_marks.h).
#include "src/tpu/internal/owner_marks.h"

#include "src/base/json.h"
#include "src/tpu/api.h"

namespace hyperslice::tpu::internal {

using jsonfield::ObjectField;
using jsonfield::StringValue;

namespace json = boost::json;

GceOwner OwnerOfChild(const json::object& cr, const std::string& cluster_id) {
  GceOwner owner;
  const json::object* meta = ObjectField(cr, "metadata");
  if (meta == nullptr) return owner;
  owner.ns = StringValue(*meta, "namespace");
  owner.name = StringValue(*meta, "name");
  owner.uid = StringValue(*meta, "uid");
  owner.cluster = cluster_id;
  if (const auto* refs = meta->if_contains("ownerReferences"); refs && refs->is_array()) {
    for (const auto& r : refs->as_array()) {
      if (!r.is_object()) continue;
      const auto* c = r.as_object().if_contains("controller");
      if (c != nullptr && c->is_bool() && c->as_bool()) {
        owner.name = StringValue(r.as_object(), "name");
        owner.uid = StringValue(r.as_object(), "uid");
        break;
      }
    }
  }
  return owner;
}

std::map<std::string, std::string> OwnerLabels(const GceOwner& owner) {
  return {{kGceLabelManaged, "true"},
          {kGceLabelCluster, GceLabelValue(owner.cluster)},
          {kGceLabelGroupUid, GceLabelValue(owner.uid)},
          {kGceLabelGroup, GceLabelValue(owner.ns + "-" + owner.name)}};
}

std::string OwnerDescription(const GceOwner& owner) {
  return "hyperslice owner=" + owner.ns + "/" + owner.name + " uid=" + owner.uid +
         " cluster=" + owner.cluster;
}

std::string DescriptionWithOwner(std::string_view description, const GceOwner& owner) {
  if (description.empty()) return OwnerDescription(owner);
  return std::string(description) + "; " + OwnerDescription(owner);
}

OwnerMarks OwnerMarksFromLabels(const json::object& labels) {
  return {StringValue(labels, kGceLabelGroupUid), StringValue(labels, kGceLabelCluster)};
}

OwnerMarks OwnerMarksFromDescription(std::string_view description) {
  OwnerMarks marks;
  size_t at = description.find("hyperslice owner=");
  if (at == std::string_view::npos) return marks;
  std::string_view rest = description.substr(at);
  auto token = [&](std::string_view key) -> std::string {
    size_t p = rest.find(key);
    if (p == std::string_view::npos) return {};
    p += key.size();
    size_t end = rest.find_first_of(" ;\n", p);
    return std::string(rest.substr(p, end == std::string_view::npos ? end : end - p));
  };
  marks.uid = token(" uid=");
  marks.cluster = token(" cluster=");
  return marks;
}

std::string ForeignOwnerMessage(const OwnerMarks& marks, const GceOwner& owner) {
  if (!marks.cluster.empty() && marks.cluster != GceLabelValue(owner.cluster) &&
      marks.cluster != owner.cluster) {
    return "belongs to another cluster (" + marks.cluster + ")";
  }
  if (!marks.uid.empty() && marks.uid != GceLabelValue(owner.uid) && marks.uid != owner.uid) {
    return "belongs to another TPUNodeGroup (uid " + marks.uid + ")";
  }
  return {};
}

}  // namespace hyperslice::tpu::internal
