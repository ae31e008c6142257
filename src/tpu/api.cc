#include "src/tpu/api.h"

#include <openssl/evp.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <functional>
#include <string>
#include <vector>

#include "src/base/strings.h"

namespace hyperslice::tpu {
namespace {

kube::Resource Make(const char* plural, const char* kind) {
  return kube::Resource{kGroup, kVersion, plural, kind, true};
}

std::string Sha256Hex8(std::string_view s) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> md{};
  unsigned int len = 0;
  EVP_Digest(s.data(), s.size(), md.data(), &len, EVP_sha256(), nullptr);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (int i = 0; i < 4; ++i) {
    out += kHex[md[i] >> 4];
    out += kHex[md[i] & 0xf];
  }
  return out;
}

bool IsLower(char c) { return c >= 'a' && c <= 'z'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsAlnum(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; }

// Cuts `s` to `max` characters, replacing its tail with "-<hash8>" when it does not fit.
std::string FitWithHash(std::string s, std::string_view original, size_t max,
                        const std::function<bool(char)>& ok_end) {
  if (s.size() <= max) return s;
  std::string hash = Sha256Hex8(original);
  s.resize(max - hash.size() - 1);
  while (!s.empty() && !ok_end(s.back())) s.pop_back();
  return s + "-" + hash;
}

}  // namespace

const kube::Resource& TPUNodeGroups() {
  static const kube::Resource r = Make("tpunodegroups", "TPUNodeGroup");
  return r;
}
const kube::Resource& ResourcePolicies() {
  static const kube::Resource r = Make("resourcepolicies", "ResourcePolicy");
  return r;
}
const kube::Resource& InstanceTemplates() {
  static const kube::Resource r = Make("instancetemplates", "InstanceTemplate");
  return r;
}
const kube::Resource& ManagedInstanceGroups() {
  static const kube::Resource r = Make("managedinstancegroups", "ManagedInstanceGroup");
  return r;
}

std::string GceName(std::string_view group_name, std::string_view role, std::string_view uid) {
  std::string base;
  for (char c : group_name) {
    char l = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    base += (IsLower(l) || IsDigit(l) || l == '-') ? l : '-';
  }
  if (base.empty() || !IsLower(base.front())) base.insert(base.begin(), 't');
  std::string suffix = "-" + std::string(role) + "-" + Sha256Hex8(uid);
  const size_t room = 63 - suffix.size();
  if (base.size() > room) base.resize(room);
  while (!base.empty() && base.back() == '-') base.pop_back();
  if (base.empty()) base = "t";
  return base + suffix;
}

std::string GceLabelValue(std::string_view s) {
  std::string v;
  for (char c : s) {
    char l = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    v += (IsLower(l) || IsDigit(l) || l == '_' || l == '-') ? l : '_';
  }
  return FitWithHash(std::move(v), s, 63, [](char) { return true; });
}

std::string KubeLabelValue(std::string_view s) {
  std::string v;
  for (char c : s) v += (IsAlnum(c) || c == '.' || c == '_' || c == '-') ? c : '-';
  while (!v.empty() && !IsAlnum(v.back())) v.pop_back();
  while (!v.empty() && !IsAlnum(v.front())) v.erase(v.begin());
  return FitWithHash(std::move(v), s, 63, [](char c) { return IsAlnum(c); });
}

std::string NodeGroupLabelValue(std::string_view ns, std::string_view name) {
  return KubeLabelValue(std::string(ns) + "-" + std::string(name));
}

Result<std::string> RegionOfZone(std::string_view zone) {
  size_t dash = zone.rfind('-');
  if (dash == std::string_view::npos || dash == 0 || dash + 1 >= zone.size() ||
      zone.find('-') == dash) {
    return Error::Make(
        Error::Code::kInvalidArgument,
        "\"" + std::string(zone) + "\" is not a GCE zone (expected e.g. us-central1-c)");
  }
  return std::string(zone.substr(0, dash));
}

std::string ProviderId(std::string_view project, std::string_view zone, std::string_view instance) {
  return "gce://" + std::string(project) + "/" + std::string(zone) + "/" + std::string(instance);
}

Result<InstanceRef> ParseProviderId(std::string_view provider_id) {
  constexpr std::string_view kPrefix = "gce://";
  if (provider_id.substr(0, kPrefix.size()) != kPrefix) {
    return Error::Make(
        Error::Code::kInvalidArgument,
        "providerID \"" + std::string(provider_id) + "\" is not gce://<project>/<zone>/<instance>");
  }
  std::string_view rest = provider_id.substr(kPrefix.size());
  const std::vector<std::string> parts = Split(rest, '/');
  if (parts.size() != 3 || parts[0].empty() || parts[1].empty() || parts[2].empty()) {
    return Error::Make(
        Error::Code::kInvalidArgument,
        "providerID \"" + std::string(provider_id) + "\" is not gce://<project>/<zone>/<instance>");
  }
  return InstanceRef{parts[0], parts[1], parts[2]};
}

bool IsValidLabelValue(std::string_view v) {
  if (v.empty()) return true;
  if (v.size() > 63 || !IsAlnum(v.front()) || !IsAlnum(v.back())) return false;
  return std::all_of(v.begin(), v.end(),
                     [](char c) { return IsAlnum(c) || c == '-' || c == '_' || c == '.'; });
}

bool IsValidLabelKey(std::string_view key) {
  std::string_view name = key;
  size_t slash = key.find('/');
  if (slash != std::string_view::npos) {
    std::string_view prefix = key.substr(0, slash);
    name = key.substr(slash + 1);
    // DNS-1123 subdomain: lower-case alphanumerics, '-' and '.', alphanumeric at both ends.
    if (prefix.empty() || prefix.size() > 253) return false;
    auto ok = [](char c) { return IsLower(c) || IsDigit(c) || c == '-' || c == '.'; };
    if (!std::all_of(prefix.begin(), prefix.end(), ok)) return false;
    auto end_ok = [](char c) { return IsLower(c) || IsDigit(c); };
    if (!end_ok(prefix.front()) || !end_ok(prefix.back())) return false;
  }
  return !name.empty() && IsValidLabelValue(name);
}

Result<std::string> RenderKubeLabels(const std::map<std::string, std::string>& labels) {
  std::string out;
  for (const auto& [k, v] : labels) {  // std::map: sorted by key
    if (!IsValidLabelKey(k)) {
      return Error::Make(Error::Code::kInvalidArgument,
                         "\"" + k + "\" is not a valid Kubernetes label key");
    }
    if (!IsValidLabelValue(v)) {
      std::string message = "\"" + v + "\" (label ";
      message += k;
      message += ") is not a valid Kubernetes label value";
      return Error::Make(Error::Code::kInvalidArgument, message);
    }
    if (!out.empty()) out += ',';
    out += k;
    out += '=';
    out += v;
  }
  return out;
}

std::string ResourcePolicyUrl(std::string_view project, std::string_view region,
                              std::string_view name) {
  return "projects/" + std::string(project) + "/regions/" + std::string(region) +
         "/resourcePolicies/" + std::string(name);
}
std::string InstanceTemplateUrl(std::string_view project, std::string_view name) {
  return "projects/" + std::string(project) + "/global/instanceTemplates/" + std::string(name);
}
std::string InstanceGroupManagerUrl(std::string_view project, std::string_view zone,
                                    std::string_view name) {
  return "projects/" + std::string(project) + "/zones/" + std::string(zone) +
         "/instanceGroupManagers/" + std::string(name);
}

}  // namespace hyperslice::tpu
