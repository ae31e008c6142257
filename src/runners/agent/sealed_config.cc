// What a sealed agent measures about itself (agent.h: SealedConfigDocument,
// SealedReferenceValues).
#include <boost/json.hpp>
#include <fstream>
#include <sstream>

#include "src/runners/agent/agent.h"
#include "src/runners/attest/attest.h"
#include "src/runners/sealed/sealed.h"

namespace hyperslice::runners::agent {

std::string SealedConfigDocument(const AgentOptions& o) {
  namespace json = boost::json;
  // Keys inserted in sorted order (boost::json::object keeps insertion order); std::map iterates
  // sorted, so the document is the same for the same options.
  json::object capacity;
  for (const auto& [k, v] : o.capacity) capacity[k] = v;
  json::array devices;
  for (const DeviceConfig& d : o.devices) {
    devices.push_back(json::object{
        {"containerPath", d.container_path}, {"hostPath", d.host_path}, {"resource", d.resource}});
  }
  json::array registries;
  for (const std::string& r : o.insecure_registries) registries.emplace_back(r);
  // The workload policy decides which images run: its keys and launch policy are measured, so
  // a runner whose trusted keys were swapped is not the fleet's.
  json::value workload_policy = nullptr;
  if (o.workload_policy) {
    const policy::WorkloadPolicy& p = *o.workload_policy;
    json::array keys;
    for (const std::string& k : p.trusted_keys_pem)
      keys.emplace_back(attest::Hex(attest::Sha256(k)));
    json::array env;
    for (const std::string& e : p.allowed_env_overrides) env.emplace_back(e);
    json::object wp;
    wp["allowCommandOverride"] = p.allow_command_override;
    wp["allowLogs"] = p.allow_logs;
    wp["allowedEnvOverrides"] = std::move(env);
    if (p.allowed_mount_types) {
      json::array mounts;
      for (const std::string& m : *p.allowed_mount_types) mounts.emplace_back(m);
      wp["allowedMountTypes"] = std::move(mounts);
    }
    wp["trustedKeys"] = std::move(keys);
    workload_policy = std::move(wp);
  }
  json::object doc;
  doc["allowHostNetwork"] = o.allow_host_network;
  doc["capacity"] = std::move(capacity);
  doc["devices"] = std::move(devices);
  doc["insecureRegistries"] = std::move(registries);
  doc["registryCA"] =
      o.registry_ca_pem.empty() ? "" : attest::Hex(attest::Sha256(o.registry_ca_pem));
  doc["requireDigest"] = o.require_digest;
  doc["runtime"] = o.runtime;
  doc["sealed"] = o.sealed;
  doc["workloadPolicy"] = std::move(workload_policy);
  return json::serialize(doc);
}

Result<std::vector<std::pair<std::string, std::string>>> SealedReferenceValues(
    const AgentOptions& o) {
  const std::string path = o.binary_path.empty() ? "/proc/self/exe" : o.binary_path;
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error::Make(Error::Code::kNotFound, "cannot read " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return std::vector<std::pair<std::string, std::string>>{
      {sealed::kAgentBinary, attest::Hex(attest::Sha256(ss.str()))},
      {sealed::kAgentConfig, attest::Hex(attest::Sha256(SealedConfigDocument(o)))}};
}

}  // namespace hyperslice::runners::agent
