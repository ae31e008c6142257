#include "src/runners/sealed/sealed.h"

#include <boost/json.hpp>

namespace hyperslice::runners::sealed {

std::string WorkloadImageName(std::string_view pod_uid, std::string_view container) {
  return "workload/" + std::string(pod_uid) + "/" + std::string(container) + "/image";
}

std::string WorkloadSpecName(std::string_view pod_uid, std::string_view container) {
  return "workload/" + std::string(pod_uid) + "/" + std::string(container) + "/spec";
}

std::string CanonicalWorkloadSpec(const v1::RunPodRequest& pod, const v1::Container& c) {
  namespace json = boost::json;
  // boost::json::object keeps insertion order, so keys are inserted sorted.
  auto strings = [](const auto& list) {
    json::array a;
    for (const std::string& s : list) a.emplace_back(s);
    return a;
  };
  json::array env;
  for (const v1::EnvVar& e : c.env())
    env.push_back(json::array{json::string(e.name()), json::string(e.value())});
  json::array mounts;
  for (const v1::Mount& m : c.mounts()) {
    json::object o;
    o["path"] = m.container_path();
    o["readOnly"] = m.read_only();
    o["subPath"] = m.sub_path();
    o["volume"] = m.volume();
    mounts.push_back(std::move(o));
  }
  json::object o;
  o["args"] = strings(c.args());
  o["command"] = strings(c.command());
  o["env"] = std::move(env);
  o["hostNetwork"] = pod.host_network();
  o["image"] = c.image();
  o["mounts"] = std::move(mounts);
  o["restartPolicy"] = pod.restart_policy().empty() ? "Always" : pod.restart_policy();
  o["stdin"] = c.stdin();
  o["tty"] = c.tty();
  o["workingDir"] = c.working_dir();
  return json::serialize(o);
}

std::string ImageDigest(std::string_view image) {
  auto at = image.rfind('@');
  if (at == std::string_view::npos) return "";
  return std::string(image.substr(at + 1));
}

}  // namespace hyperslice::runners::sealed
