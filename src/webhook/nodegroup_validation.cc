// TPUNodeGroup validation beyond the CRD's schema and CEL rules: the slice shape (topology x
// machine type x nodeCount), BULK provisioning for multi-host slices, and the instance template's
// project.
#include <string>
#include <vector>

#include "src/tpu/topology.h"
#include "src/webhook/internal.h"

namespace hyperslice::webhook::internal {
namespace json = boost::json;

std::string ProjectOfTemplateUri(std::string_view uri) {
  // Full URL (".../compute/v1/projects/P/global/instanceTemplates/T") or partial
  // ("projects/P/regions/R/instanceTemplates/T"); "global/instanceTemplates/T" names none.
  size_t p = uri.rfind("projects/");
  if (p == std::string_view::npos || (p > 0 && uri[p - 1] != '/')) return "";
  std::string_view rest = uri.substr(p + 9);
  return std::string(rest.substr(0, rest.find('/')));
}

std::vector<std::string> NodeGroupSpecProblems(const json::object& spec) {
  std::vector<std::string> problems;
  std::string topology(StringAt(&spec, "topology"));
  int64_t node_count = IntAt(&spec, "nodeCount", 0);
  std::string machine(StringAt(ObjectAt(&spec, "instanceConfig"), "machineType"));
  std::string template_uri(StringAt(&spec, "instanceTemplateURI"));
  std::string mode(StringAt(&spec, "targetSizePolicyMode"));
  if (mode.empty()) mode = "BULK";  // the CRD's default

  if (!machine.empty()) {
    Result<tpu::Slice> slice = tpu::MakeSlice(machine, topology);
    if (!slice.ok()) {
      problems.push_back("spec.topology/spec.instanceConfig.machineType: " + slice.error().message);
    } else {
      std::string shape = "topology " + topology + " on " + machine;
      if (node_count != slice->hosts) {
        problems.push_back(shape + " needs nodeCount " + std::to_string(slice->hosts) + " (" +
                           std::to_string(slice->chips) + " chips / " +
                           std::to_string(slice->machine_type.chips_per_host) + " per host); got " +
                           std::to_string(node_count));
      }
      if (slice->hosts > 1 && mode != "BULK") {
        problems.push_back(shape + " spans " + std::to_string(slice->hosts) +
                           " hosts that must be provisioned together: set "
                           "spec.targetSizePolicyMode to BULK; got " +
                           mode);
      }
    }
  } else if (!template_uri.empty()) {
    Result<tpu::Slice> slice = tpu::InferSlice(topology, static_cast<int>(node_count));
    if (!slice.ok()) {
      problems.push_back("spec.topology/spec.nodeCount: " + slice.error().message +
                         "; set nodeCount to chips ÷ chips per host of the template's machine "
                         "type");
    } else if (slice->hosts > 1 && mode != "BULK") {
      problems.push_back("topology " + topology + " with nodeCount " + std::to_string(node_count) +
                         " spans several hosts that must be provisioned together: set "
                         "spec.targetSizePolicyMode to BULK; got " +
                         mode);
    }
  } else {
    problems.push_back("set spec.instanceConfig (with machineType) or spec.instanceTemplateURI");
  }

  if (!template_uri.empty()) {
    std::string project(StringAt(&spec, "project"));
    std::string uri_project = ProjectOfTemplateUri(template_uri);
    if (!uri_project.empty() && uri_project != project) {
      problems.push_back("spec.instanceTemplateURI is in project " + uri_project +
                         " but spec.project is " + project + "; use a template from project " +
                         project + " or change spec.project");
    }
  }
  return problems;
}

Decision ValidateNodeGroup(const json::object& request) {
  Decision d;
  std::string_view op = StringAt(&request, "operation");
  const json::object* kind = ObjectAt(&request, "kind");
  if ((op != "CREATE" && op != "UPDATE") || StringAt(kind, "group") != "tpu.google.com" ||
      StringAt(kind, "kind") != "TPUNodeGroup" || !StringAt(&request, "subResource").empty()) {
    return d;
  }
  const json::object* obj = ObjectAt(&request, "object");
  const json::object* spec = ObjectAt(obj, "spec");
  if (spec == nullptr) {
    d.allowed = false;
    d.code = 400;
    d.reason = "BadRequest";
    d.message = "TPUNodeGroup has no spec";
    return d;
  }
  if (op == "UPDATE") {
    // Metadata-only updates (finalizer removal during teardown) must pass even for a group that
    // predates a stricter rule.
    const json::object* old_spec = ObjectAt(ObjectAt(&request, "oldObject"), "spec");
    if (old_spec != nullptr && *old_spec == *spec) return d;
  }
  std::vector<std::string> problems = NodeGroupSpecProblems(*spec);
  if (problems.empty()) return d;
  const json::object* meta = ObjectAt(obj, "metadata");
  std::string name(StringAt(meta, "name"));
  if (name.empty()) name = std::string(StringAt(&request, "name"));
  std::string message =
      "TPUNodeGroup " + std::string(StringAt(&request, "namespace")) + "/" + name + " is invalid: ";
  for (size_t i = 0; i < problems.size(); ++i) {
    if (i > 0) message += "; ";
    message += problems[i];
  }
  d.allowed = false;
  d.code = 422;
  d.reason = "Invalid";
  d.message = std::move(message);
  return d;
}

}  // namespace hyperslice::webhook::internal
