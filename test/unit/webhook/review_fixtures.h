// Builders of AdmissionReview bodies and the objects they refer to, and a JSONPatch applier, for
// the webhook's tests and benchmark.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <boost/json.hpp>

namespace hyperslice::webhook::testing {
namespace json = boost::json;

inline json::object StatefulSet(const std::string& ns, const std::string& name,
                                const std::string& uid, int replicas, const std::string& service) {
  return json::parse(R"({"apiVersion":"apps/v1","kind":"StatefulSet","metadata":{"name":")" + name +
                     R"(","namespace":")" + ns + R"(","uid":")" + uid +
                     R"("},"spec":{"replicas":)" + std::to_string(replicas) +
                     R"(,"serviceName":")" + service + R"("}})")
      .as_object();
}

inline json::object IndexedJob(const std::string& ns, const std::string& name,
                               const std::string& uid, int completions,
                               const std::string& subdomain) {
  return json::parse(R"({"apiVersion":"batch/v1","kind":"Job","metadata":{"name":")" + name +
                     R"(","namespace":")" + ns + R"(","uid":")" + uid +
                     R"("},"spec":{"completionMode":"Indexed","completions":)" +
                     std::to_string(completions) + R"(,"template":{"spec":{"subdomain":")" +
                     subdomain + R"("}}}})")
      .as_object();
}

inline json::object NodeGroup(const std::string& ns, const std::string& name,
                              const std::string& topology, const std::string& machine_type,
                              int node_count, const std::string& mode = "BULK") {
  json::object g =
      json::parse(
          R"({"apiVersion":"tpu.google.com/v1alpha1","kind":"TPUNodeGroup","metadata":{"name":")" +
          name + R"(","namespace":")" + ns +
          R"(","uid":"g-uid"},"spec":{"project":"my-project","nodeLocation":"us-central1-c","acceleratorConnectionMode":"STATIC"}})")
          .as_object();
  json::object& spec = g["spec"].as_object();
  spec["topology"] = topology;
  spec["nodeCount"] = node_count;
  spec["targetSizePolicyMode"] = mode;
  if (!machine_type.empty()) {
    spec["instanceConfig"] = json::object{{"machineType", machine_type},
                                          {"provisioningModel", "RESERVATION_BOUND"},
                                          {"reservation", "r"}};
  }
  return g;
}

inline json::object Container(const std::string& name, int tpus,
                              const std::vector<std::pair<std::string, std::string>>& env = {},
                              bool with_env_list = true) {
  json::object c{{"name", name}, {"image", "busybox"}};
  if (tpus > 0) {
    c["resources"] =
        json::object{{"limits", json::object{{"google.com/tpu", std::to_string(tpus)}}},
                     {"requests", json::object{{"google.com/tpu", std::to_string(tpus)}}}};
  }
  if (with_env_list) {
    json::array e;
    for (const auto& [k, v] : env) e.push_back(json::object{{"name", k}, {"value", v}});
    c["env"] = std::move(e);
  }
  return c;
}

inline json::object Pod(const std::string& ns, const std::string& name,
                        std::vector<json::object> containers) {
  json::array cs;
  for (auto& c : containers) cs.push_back(std::move(c));
  return json::object{{"apiVersion", "v1"},
                      {"kind", "Pod"},
                      {"metadata", json::object{{"name", name}, {"namespace", ns}}},
                      {"spec", json::object{{"containers", std::move(cs)}}}};
}

inline void SetOwner(json::object& obj, const std::string& api_version, const std::string& kind,
                     const std::string& name, const std::string& uid) {
  obj["metadata"].as_object()["ownerReferences"] =
      json::array{json::object{{"apiVersion", api_version},
                               {"kind", kind},
                               {"name", name},
                               {"uid", uid},
                               {"controller", true},
                               {"blockOwnerDeletion", true}}};
}

inline void SetLabel(json::object& obj, const std::string& k, const std::string& v) {
  json::object& meta = obj["metadata"].as_object();
  if (!meta.contains("labels")) meta["labels"] = json::object{};
  meta["labels"].as_object()[k] = v;
}

inline void SetAnnotation(json::object& obj, const std::string& k, const std::string& v) {
  json::object& meta = obj["metadata"].as_object();
  if (!meta.contains("annotations")) meta["annotations"] = json::object{};
  meta["annotations"].as_object()[k] = v;
}

inline std::string Review(const json::object& object, const std::string& uid = "req-uid-1",
                          const std::string& operation = "CREATE",
                          const json::object* old_object = nullptr,
                          const std::string& review_version = "admission.k8s.io/v1") {
  std::string kind = json::value_to<std::string>(object.at("kind"));
  std::string api_version = json::value_to<std::string>(object.at("apiVersion"));
  std::string group, version = api_version;
  if (size_t slash = api_version.find('/'); slash != std::string::npos) {
    group = api_version.substr(0, slash);
    version = api_version.substr(slash + 1);
  }
  std::string resource = kind == "Pod"           ? "pods"
                         : kind == "StatefulSet" ? "statefulsets"
                                                 : "tpunodegroups";
  const json::object& meta = object.at("metadata").as_object();
  json::object request{
      {"uid", uid},
      {"kind", json::object{{"group", group}, {"version", version}, {"kind", kind}}},
      {"resource", json::object{{"group", group}, {"version", version}, {"resource", resource}}},
      {"namespace", meta.at("namespace")},
      {"operation", operation},
      {"userInfo",
       json::object{{"username", "system:serviceaccount:kube-system:statefulset-controller"}}},
      {"object", object},
      {"oldObject", old_object ? json::value(*old_object) : json::value(nullptr)},
      {"dryRun", false}};
  if (meta.contains("name")) request["name"] = meta.at("name");
  return json::serialize(json::object{
      {"apiVersion", review_version}, {"kind", "AdmissionReview"}, {"request", request}});
}

inline std::string DecodeBase64(std::string_view in) {
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  int bits = 0;
  uint32_t acc = 0;
  for (char c : in) {
    int v = val(c);
    if (v < 0) continue;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xff);
    }
  }
  return out;
}

// Applies RFC 6902 "add" and "replace" operations (the ops the webhook emits); returns false on
// anything it cannot apply, as the apiserver would refuse it.
inline bool ApplyPatch(json::value& doc, const json::array& patch) {
  for (const json::value& opv : patch) {
    const json::object& op = opv.as_object();
    bool replace = op.at("op").as_string() == "replace";
    if (op.at("op").as_string() != "add" && !replace) return false;
    std::string path(op.at("path").as_string());
    std::vector<std::string> tokens;
    for (size_t p = 1; p <= path.size();) {
      size_t q = path.find('/', p);
      if (q == std::string::npos) q = path.size();
      tokens.push_back(path.substr(p, q - p));
      p = q + 1;
    }
    json::value* cur = &doc;
    for (size_t i = 0; i + 1 < tokens.size(); ++i) {
      if (cur->is_object()) {
        cur = cur->as_object().if_contains(tokens[i]);
      } else if (cur->is_array()) {
        size_t idx = std::stoul(tokens[i]);
        cur = idx < cur->as_array().size() ? &cur->as_array()[idx] : nullptr;
      } else {
        cur = nullptr;
      }
      if (cur == nullptr) return false;
    }
    const std::string& last = tokens.back();
    if (replace) {
      if (!cur->is_object() || !cur->as_object().contains(last)) return false;
      cur->as_object()[last] = op.at("value");
    } else if (cur->is_object()) {
      cur->as_object()[last] = op.at("value");
    } else if (cur->is_array()) {
      if (last != "-") return false;
      cur->as_array().push_back(op.at("value"));
    } else {
      return false;
    }
  }
  return true;
}

// The response of an AdmissionReview answer body.
inline json::object ResponseOf(const std::string& body) {
  return json::parse(body).as_object().at("response").as_object();
}

// Env of container `i` of `pod` after applying the response's patch (as name=value strings).
// `pod_spec_path`: where the containers are ("spec", or "spec/template/spec" in a StatefulSet).
inline std::vector<std::string> EnvAfter(const json::object& pod, const json::object& response,
                                         size_t i = 0, const std::string& pod_spec_path = "spec") {
  json::value doc = pod;
  if (response.contains("patch")) {
    json::array patch = json::parse(DecodeBase64(response.at("patch").as_string())).as_array();
    if (!ApplyPatch(doc, patch)) return {"<patch does not apply>"};
  }
  std::vector<std::string> out;
  const json::value* spec = &doc;
  for (size_t p = 0; p <= pod_spec_path.size();) {
    size_t q = pod_spec_path.find('/', p);
    if (q == std::string::npos) q = pod_spec_path.size();
    spec = &spec->at(pod_spec_path.substr(p, q - p));
    p = q + 1;
  }
  const json::value* env = spec->at("containers").at(i).as_object().if_contains("env");
  if (env == nullptr) return out;
  for (const json::value& e : env->as_array()) {
    const json::object& o = e.as_object();
    std::string v = o.contains("value") ? std::string(o.at("value").as_string()) : "<valueFrom>";
    out.push_back(std::string(o.at("name").as_string()) + "=" + v);
  }
  return out;
}

}  // namespace hyperslice::webhook::testing
