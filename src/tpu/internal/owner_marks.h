// Who a GCE resource belongs to, and how that is written on it: labels where GCE has them
// (instance templates), an owner marker in the description where it has none (resource policies,
// instance group managers). A resource marked for another owner is never touched; one without
// marks (made by hand) is adopted.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include <boost/json/object.hpp>

namespace hyperslice::tpu::internal {

// The TPUNodeGroup that owns a child CR (its controller owner reference; the CR itself when it
// has none) and the cluster.
struct GceOwner {
  std::string ns, name, uid, cluster;
};
GceOwner OwnerOfChild(const boost::json::object& cr, const std::string& cluster_id);

// GCE labels naming the owner (kGceLabel* of api.h).
std::map<std::string, std::string> OwnerLabels(const GceOwner& owner);
// "hyperslice owner=<ns>/<name> uid=<uid> cluster=<id>", the owner marker in a description.
std::string OwnerDescription(const GceOwner& owner);
// `description` followed by the owner marker ("<description>; hyperslice owner=...").
std::string DescriptionWithOwner(std::string_view description, const GceOwner& owner);

// Owner facts found on an existing GCE resource; empty strings when absent.
struct OwnerMarks {
  std::string uid, cluster;
};
OwnerMarks OwnerMarksFromLabels(const boost::json::object& labels);
OwnerMarks OwnerMarksFromDescription(std::string_view description);
// Empty when `marks` do not name another owner (absent marks: a resource made by hand, adopted);
// else a message naming the other owner.
std::string ForeignOwnerMessage(const OwnerMarks& marks, const GceOwner& owner);

}  // namespace hyperslice::tpu::internal
