// The schema subset and validation (see internal.h). Field and input names come from RunPod's
// GraphQL spec as its clients use it: runpod-python 1.12.0 (runpod/api/queries/*.py,
// runpod/api/mutations/pods.py), runpodctl (api/pod.go, api/cloud.go), the RunPod docs
// (sdks/graphql/manage-pods.mdx: lowestPrice input and fields, podRentInterruptable) and the
// schema types published with the runpod-api-helper TypeScript types (Pod, PodMachineInfo,
// PodFindAndDeployOnDemandInput, PodRentInterruptableInput, GpuLowestPriceInput, DataCenter).
// Validation messages are graphql-js 16's, which Apollo Server (RunPod's GraphQL server) uses.
#include <boost/json.hpp>

#include "sim/runpod/internal.h"

namespace hyperslice::sim::runpod {

namespace json = boost::json;
using graphql::Value;

std::string TypeRef::Spelling() const {
  std::string s = name;
  if (list) s = "[" + s + (item_non_null ? "!" : "") + "]";
  if (non_null) s += "!";
  return s;
}

const FieldDef* Schema::Field(const std::string& type, const std::string& field) const {
  auto t = objects.find(type);
  if (t == objects.end()) return nullptr;
  auto f = t->second.find(field);
  return f == t->second.end() ? nullptr : &f->second;
}

json::object GqlError::ToJson() const {
  json::object o{{"message", message}};
  if (!locations.empty()) {
    json::array locs;
    for (const auto& l : locations)
      locs.push_back(json::object{{"line", l.line}, {"column", l.column}});
    o["locations"] = std::move(locs);
  }
  if (!path.empty()) {
    json::array p;
    for (const auto& s : path) p.push_back(json::value(s));
    o["path"] = std::move(p);
  }
  o["extensions"] = json::object{{"code", code}};
  return o;
}

namespace {

TypeRef T(std::string name) { return {std::move(name)}; }
TypeRef NN(std::string name) { return {std::move(name), true}; }
TypeRef L(std::string name) { return {std::move(name), false, true}; }

Schema Build() {
  Schema s;
  s.scalars = {"String", "Int", "Float", "Boolean", "ID", "Void"};
  s.enums["CloudTypeEnum"] = {"SECURE", "COMMUNITY", "ALL"};
  s.enums["ComputeType"] = {"CPU", "GPU"};
  s.enums["Compliance"] = {"GDPR",    "ISO_IEC_27001", "ISO_14001",    "PCI_DSS",
                           "HITRUST", "SOC_1_TYPE_2",  "SOC_2_TYPE_2", "SOC_3_TYPE_2",
                           "ITAR",    "FISMA_HIGH"};

  auto F = [](TypeRef t, std::map<std::string, TypeRef> args = {}) {
    return FieldDef{std::move(t), std::move(args)};
  };
  s.objects["Query"] = {
      {"gpuTypes", F(L("GpuType"), {{"input", T("GpuTypeFilter")}})},
      {"pod", F(T("Pod"), {{"input", NN("PodFilter")}})},
      {"myself", F(T("User"))},
      {"dataCenters", F(L("DataCenter"))},
  };
  s.objects["Mutation"] = {
      {"podFindAndDeployOnDemand", F(T("Pod"), {{"input", T("PodFindAndDeployOnDemandInput")}})},
      {"podRentInterruptable", F(T("Pod"), {{"input", NN("PodRentInterruptableInput")}})},
      {"podTerminate", F(T("Void"), {{"input", NN("PodTerminateInput")}})},
  };
  s.objects["GpuType"] = {
      {"id", F(T("String"))},
      {"displayName", F(T("String"))},
      {"manufacturer", F(T("String"))},
      {"memoryInGb", F(T("Int"))},
      {"cudaCores", F(T("Int"))},
      {"secureCloud", F(T("Boolean"))},
      {"communityCloud", F(T("Boolean"))},
      {"securePrice", F(T("Float"))},
      {"communityPrice", F(T("Float"))},
      {"secureSpotPrice", F(T("Float"))},
      {"communitySpotPrice", F(T("Float"))},
      {"oneWeekPrice", F(T("Float"))},
      {"oneMonthPrice", F(T("Float"))},
      {"threeMonthPrice", F(T("Float"))},
      {"sixMonthPrice", F(T("Float"))},
      {"clusterPrice", F(T("Float"))},
      {"maxGpuCount", F(T("Int"))},
      {"maxGpuCountSecureCloud", F(T("Int"))},
      {"maxGpuCountCommunityCloud", F(T("Int"))},
      {"minPodGpuCount", F(T("Int"))},
      {"lowestPrice", F(T("LowestPrice"), {{"input", T("GpuLowestPriceInput")}})},
  };
  s.objects["LowestPrice"] = {
      {"gpuName", F(T("String"))},
      {"gpuTypeId", F(T("String"))},
      {"minimumBidPrice", F(T("Float"))},
      {"uninterruptablePrice", F(T("Float"))},
      {"minMemory", F(T("Int"))},
      {"minVcpu", F(T("Int"))},
      {"minDisk", F(T("Int"))},
      {"minDownload", F(T("Int"))},
      {"minUpload", F(T("Int"))},
      {"rentalPercentage", F(T("Float"))},
      {"rentedCount", F(T("Int"))},
      {"totalCount", F(T("Int"))},
      {"stockStatus", F(T("String"))},
      {"countryCode", F(T("String"))},
      {"supportPublicIp", F(T("Boolean"))},
      {"compliance", F(L("Compliance"))},
      {"maxUnreservedGpuCount", F(T("Int"))},
      {"availableGpuCounts", F(L("Int"))},
  };
  s.objects["DataCenter"] = {
      {"id", F(T("String"))},
      {"name", F(T("String"))},
      {"location", F(T("String"))},
      {"listed", F(T("Boolean"))},
      {"storageSupport", F(T("Boolean"))},
      {"compliance", F(L("Compliance"))},
      {"gpuAvailability", F(L("GpuAvailability"))},
  };
  s.objects["GpuAvailability"] = {
      {"id", F(T("String"))},
      {"available", F(T("Boolean"))},
      {"stockStatus", F(T("String"))},
      {"gpuTypeId", F(T("String"))},
      {"gpuTypeDisplayName", F(T("String"))},
      {"displayName", F(T("String"))},
  };
  s.objects["User"] = {
      {"id", F(T("String"))},
      {"email", F(T("String"))},
      {"pubKey", F(T("String"))},
      {"clientBalance", F(T("Float"))},
      {"currentSpendPerHr", F(T("Float"))},
      {"pods", F(L("Pod"))},
      {"networkVolumes", F(L("NetworkVolume"))},
  };
  s.objects["NetworkVolume"] = {
      {"id", F(T("String"))},
      {"name", F(T("String"))},
      {"size", F(T("Int"))},
      {"dataCenterId", F(T("String"))},
  };
  s.objects["Pod"] = {
      {"id", F(T("String"))},
      {"name", F(T("String"))},
      {"desiredStatus", F(T("String"))},
      {"podType", F(T("String"))},
      {"costPerHr", F(T("Float"))},
      {"adjustedCostPerHr", F(T("Float"))},
      {"gpuCount", F(T("Int"))},
      {"vcpuCount", F(T("Int"))},
      {"memoryInGb", F(T("Int"))},
      {"containerDiskInGb", F(T("Int"))},
      {"volumeInGb", F(T("Int"))},
      {"volumeMountPath", F(T("String"))},
      {"imageName", F(T("String"))},
      {"dockerArgs", F(T("String"))},
      {"dockerId", F(T("String"))},
      {"env", F(L("String"))},
      {"port", F(T("Int"))},
      {"ports", F(T("String"))},
      {"lastStatusChange", F(T("String"))},
      {"machineId", F(T("String"))},
      {"uptimeSeconds", F(T("Int"))},
      {"createdAt", F(T("String"))},
      {"lastStartedAt", F(T("String"))},
      {"templateId", F(T("String"))},
      {"networkVolumeId", F(T("String"))},
      {"locked", F(T("Boolean"))},
      {"runtime", F(T("PodRuntime"))},
      {"machine", F(T("PodMachineInfo"))},
  };
  s.objects["PodRuntime"] = {
      {"uptimeInSeconds", F(T("Int"))},
      {"ports", F(L("PodRuntimePorts"))},
      {"gpus", F(L("PodRuntimeGpus"))},
      {"container", F(T("PodRuntimeContainer"))},
  };
  s.objects["PodRuntimePorts"] = {
      {"ip", F(T("String"))},      {"isIpPublic", F(T("Boolean"))}, {"privatePort", F(T("Int"))},
      {"publicPort", F(T("Int"))}, {"type", F(T("String"))},
  };
  s.objects["PodRuntimeGpus"] = {
      {"id", F(T("String"))},
      {"gpuUtilPercent", F(T("Int"))},
      {"memoryUtilPercent", F(T("Int"))},
  };
  s.objects["PodRuntimeContainer"] = {
      {"cpuPercent", F(T("Int"))},
      {"memoryPercent", F(T("Int"))},
  };
  s.objects["PodMachineInfo"] = {
      {"id", F(T("String"))},
      {"podHostId", F(T("String"))},
      {"gpuDisplayName", F(T("String"))},
      {"gpuTypeId", F(T("String"))},
      {"dataCenterId", F(T("String"))},
      {"location", F(T("String"))},
      {"secureCloud", F(T("Boolean"))},
      {"supportPublicIp", F(T("Boolean"))},
      {"costPerHr", F(T("Float"))},
      {"currentPricePerGpu", F(T("Float"))},
      {"maxDownloadSpeedMbps", F(T("Int"))},
      {"maxUploadSpeedMbps", F(T("Int"))},
      {"cpuCount", F(T("Int"))},
  };

  s.inputs["GpuTypeFilter"] = {{"id", T("String")}, {"ids", L("String")}};
  s.inputs["PodFilter"] = {{"podId", NN("String")}};
  s.inputs["PodTerminateInput"] = {{"podId", NN("String")}};
  s.inputs["EnvironmentVariableInput"] = {{"key", NN("String")}, {"value", NN("String")}};
  s.inputs["GpuLowestPriceInput"] = {
      {"gpuCount", T("Int")},
      {"dataCenterId", T("String")},
      {"countryCode", T("String")},
      {"secureCloud", T("Boolean")},
      {"globalNetwork", T("Boolean")},
      {"includeAiApi", T("Boolean")},
      {"minDisk", T("Int")},
      {"minDownload", T("Int")},
      {"minUpload", T("Int")},
      {"minMemoryInGb", T("Int")},
      {"minVcpuCount", T("Int")},
      {"supportPublicIp", T("Boolean")},
      {"totalDisk", T("Int")},
      {"cudaVersion", T("String")},
      {"allowedCudaVersions", L("String")},
      {"compliance", L("Compliance")},
  };
  std::map<std::string, TypeRef> deploy = {
      {"cloudType", T("CloudTypeEnum")},
      {"containerDiskInGb", T("Int")},
      {"countryCode", T("String")},
      {"dataCenterId", T("String")},
      {"dockerArgs", T("String")},
      {"env", L("EnvironmentVariableInput")},
      {"gpuCount", T("Int")},
      {"gpuTypeId", T("String")},
      {"imageName", T("String")},
      {"minDisk", T("Int")},
      {"minDownload", T("Int")},
      {"minMemoryInGb", T("Int")},
      {"minUpload", T("Int")},
      {"minVcpuCount", T("Int")},
      {"name", T("String")},
      {"networkVolumeId", T("String")},
      {"port", T("Int")},
      {"ports", T("String")},
      {"startJupyter", T("Boolean")},
      {"startSsh", T("Boolean")},
      {"stopAfter", T("String")},
      {"supportPublicIp", T("Boolean")},
      {"templateId", T("String")},
      {"terminateAfter", T("String")},
      {"volumeInGb", T("Int")},
      {"volumeKey", T("String")},
      {"volumeMountPath", T("String")},
      {"cudaVersion", T("String")},
      {"allowedCudaVersions", L("String")},
  };
  auto on_demand = deploy;
  on_demand["aiApiId"] = T("String");
  on_demand["deployCost"] = T("Float");
  on_demand["gpuTypeIdList"] = L("String");
  on_demand["instanceIds"] = L("String");
  on_demand["computeType"] = T("ComputeType");
  s.inputs["PodFindAndDeployOnDemandInput"] = on_demand;
  auto spot = deploy;
  spot["bidPerGpu"] = NN("Float");
  s.inputs["PodRentInterruptableInput"] = spot;
  return s;
}

// graphql-js's printing of a literal in error messages.
std::string Print(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kNull:
      return "null";
    case Value::Kind::kInt:
      return std::to_string(v.i);
    case Value::Kind::kFloat:
      return json::serialize(json::value(v.f));
    case Value::Kind::kString:
      return json::serialize(json::value(v.s));
    case Value::Kind::kBool:
      return v.b ? "true" : "false";
    case Value::Kind::kEnum:
    case Value::Kind::kVariable:
      return v.s;
    case Value::Kind::kList: {
      std::string s = "[";
      for (size_t k = 0; k < v.list.size(); ++k) s += (k ? ", " : "") + Print(v.list[k]);
      return s + "]";
    }
    case Value::Kind::kObject: {
      std::string s = "{";
      for (size_t k = 0; k < v.fields.size(); ++k) {
        if (k) s += ", ";
        s += v.fields[k].name;
        s += ": ";
        s += Print(v.fields[k].value);
      }
      return s + "}";
    }
  }
  return "";
}

class Validator {
 public:
  Validator(const Schema& s, std::vector<GqlError>& out) : s_(s), out_(out) {}

  void Selections(const std::string& type, const std::vector<graphql::Selection>& sels) {
    for (const auto& sel : sels) {
      if (sel.name == "__typename") {
        if (sel.has_selection_set) {
          Err("Field \"__typename\" must not have a selection since type \"String!\" has no "
              "subfields.",
              sel.location);
        }
        continue;
      }
      const FieldDef* f = s_.Field(type, sel.name);
      if (!f) {
        Err("Cannot query field \"" + sel.name + "\" on type \"" + type + "\".", sel.location);
        continue;
      }
      Args(type, sel, *f);
      bool object = s_.objects.count(f->type.name) > 0;
      if (object && !sel.has_selection_set) {
        Err("Field \"" + sel.name + "\" of type \"" + f->type.Spelling() +
                "\" must have a selection of subfields. Did you mean \"" + sel.name + " { ... }\"?",
            sel.location);
      } else if (!object && sel.has_selection_set) {
        Err("Field \"" + sel.name + "\" must not have a selection since type \"" +
                f->type.Spelling() + "\" has no subfields.",
            sel.location);
      } else if (object) {
        Selections(f->type.name, sel.selections);
      }
    }
  }

 private:
  void Err(std::string m, graphql::Location loc) {
    out_.push_back({std::move(m), "GRAPHQL_VALIDATION_FAILED", {loc}, {}});
  }

  void Args(const std::string& type, const graphql::Selection& sel, const FieldDef& f) {
    for (const auto& [name, value] : sel.args) {
      auto it = f.args.find(name);
      if (it == f.args.end()) {
        std::string m = "Unknown argument \"" + name + "\" on field \"";
        m += type;
        m += ".";
        m += sel.name;
        m += "\".";
        Err(std::move(m), sel.location);
        continue;
      }
      Coerce(it->second, value, sel.location);
    }
    for (const auto& [name, t] : f.args) {
      if (t.non_null && !sel.Arg(name)) {
        Err("Field \"" + sel.name + "\" argument \"" + name + "\" of type \"" + t.Spelling() +
                "\" is required, but it was not provided.",
            sel.location);
      }
    }
  }

  void Coerce(const TypeRef& t, const Value& v, graphql::Location loc) {
    if (v.kind == Value::Kind::kNull) {
      if (t.non_null) Err("Expected value of type \"" + t.Spelling() + "\", found null.", loc);
      return;
    }
    if (t.list) {
      TypeRef item{t.name, t.item_non_null};
      if (v.kind == Value::Kind::kList) {
        for (const auto& e : v.list) Coerce(item, e, loc);
      } else {
        Coerce(item, v, loc);  // input coercion accepts one item for a list
      }
      return;
    }
    const std::string& n = t.name;
    if (n == "Int") {
      if (v.kind != Value::Kind::kInt || v.i > INT32_MAX || v.i < INT32_MIN) {
        Err("Int cannot represent non-integer value: " + Print(v), loc);
      }
    } else if (n == "Float") {
      if (v.kind != Value::Kind::kInt && v.kind != Value::Kind::kFloat) {
        Err("Float cannot represent non numeric value: " + Print(v), loc);
      }
    } else if (n == "String") {
      if (v.kind != Value::Kind::kString) {
        Err("String cannot represent a non string value: " + Print(v), loc);
      }
    } else if (n == "ID") {
      if (v.kind != Value::Kind::kString && v.kind != Value::Kind::kInt) {
        Err("ID cannot represent a non-string and non-integer value: " + Print(v), loc);
      }
    } else if (n == "Boolean") {
      if (v.kind != Value::Kind::kBool) {
        Err("Boolean cannot represent a non boolean value: " + Print(v), loc);
      }
    } else if (auto e = s_.enums.find(n); e != s_.enums.end()) {
      // Enum values are names; a variable's string value is accepted as the enum's name.
      bool named = v.kind == Value::Kind::kEnum || v.kind == Value::Kind::kString;
      if (!named || !e->second.count(v.s)) {
        Err("Value " + Print(v) + " does not exist in \"" + n + "\" enum.", loc);
      }
    } else if (auto in = s_.inputs.find(n); in != s_.inputs.end()) {
      if (v.kind != Value::Kind::kObject) {
        Err("Expected value of type \"" + t.Spelling() + "\", found " + Print(v) + ".", loc);
        return;
      }
      for (const auto& [fname, fv] : v.fields) {
        auto f = in->second.find(fname);
        if (f == in->second.end()) {
          std::string m = "Field \"" + fname + "\" is not defined by type \"";
          m += n;
          m += "\".";
          Err(std::move(m), loc);
          continue;
        }
        Coerce(f->second, fv, loc);
      }
      for (const auto& [fname, ft] : in->second) {
        if (ft.non_null && !v.Field(fname)) {
          std::string m = "Field \"" + n;
          m += ".";
          m += fname;
          m += "\" of required type \"";
          m += ft.Spelling();
          m += "\" was not provided.";
          Err(std::move(m), loc);
        }
      }
    }
  }

  const Schema& s_;
  std::vector<GqlError>& out_;
};

}  // namespace

const Schema& RunPodSchema() {
  static const Schema s = Build();
  return s;
}

std::vector<GqlError> Validate(const graphql::Document& doc, const Schema& schema) {
  std::vector<GqlError> out;
  Validator v(schema, out);
  v.Selections(doc.operation == graphql::Document::Operation::kQuery ? "Query" : "Mutation",
               doc.selections);
  return out;
}

}  // namespace hyperslice::sim::runpod
