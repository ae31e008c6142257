// A container's env list as "NAME=value" strings ("NAME=<valueFrom>" for a reference), in order:
// what the webhook tests compare after the apiserver stored what the webhook patched.
#pragma once

#include <string>
#include <vector>

#include <boost/json.hpp>

namespace hyperslice::webhook_testing {

// Of a pod spec (or a pod template's spec).
inline std::vector<std::string> EnvOf(const boost::json::object& pod_spec, size_t container = 0) {
  std::vector<std::string> out;
  const boost::json::value* env =
      pod_spec.at("containers").at(container).as_object().if_contains("env");
  if (env == nullptr) return out;
  for (const boost::json::value& e : env->as_array()) {
    const boost::json::object& o = e.as_object();
    out.push_back(std::string(o.at("name").as_string()) + "=" +
                  (o.contains("value") ? std::string(o.at("value").as_string()) : "<valueFrom>"));
  }
  return out;
}

// Of a pod.
inline std::vector<std::string> PodEnvOf(const boost::json::object& pod, size_t container = 0) {
  return EnvOf(pod.at("spec").as_object(), container);
}

}  // namespace hyperslice::webhook_testing
