// TPUNodeGroup validation beyond the CRD's schema and CEL rules: the slice shape (topology x
// machine type x nodeCount), BULK provisioning for multi-host slices, the instance template's
// project, and the syntax of every value that reaches GCE or a VM's startup script (URLs and
// names GCE would refuse, metadata keys and sizes, service accounts, the control-plane address),
// so nothing that GCE rejects for syntax, and nothing that could inject into a shell or a kubelet
// flag, gets past admission. Each problem names the field and says what to write instead.
//
// The checks are hand-written scanners, not regular expressions: they run on untrusted strings of
// any length (std::regex recurses per character).
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "src/base/json.h"
#include "src/base/strings.h"
#include "src/tpu/api.h"
#include "src/tpu/validation.h"
#include "src/webhook/internal.h"

namespace hyperslice::webhook::internal {
namespace json = boost::json;
using jsonfield::ArrayField;
using jsonfield::ObjectField;
using jsonfield::StringField;

namespace {

// GCE limits on instance metadata (compute/docs/metadata/setting-custom-metadata#limitations).
constexpr size_t kMetadataValueMaxBytes = size_t{256} * 1024;
constexpr size_t kMetadataTotalMaxBytes = size_t{512} * 1024;
// What hyperslice adds itself (startup script, kube-labels, join values): user metadata must
// leave this much of the total for it.
constexpr size_t kMetadataReservedBytes = size_t{64} * 1024;

bool Lower(char c) { return c >= 'a' && c <= 'z'; }
bool Digit(char c) { return c >= '0' && c <= '9'; }
bool LowerAlnum(char c) { return Lower(c) || Digit(c); }
bool Alnum(char c) { return LowerAlnum(c) || (c >= 'A' && c <= 'Z'); }

// A GCE resource name: [a-z]([-a-z0-9]*[a-z0-9])?, at most 63 characters.
bool IsGceName(std::string_view s) {
  if (s.empty() || s.size() > 63 || !Lower(s.front()) || !LowerAlnum(s.back())) return false;
  for (char c : s) {
    if (!LowerAlnum(c) && c != '-') return false;
  }
  return true;
}

// A project id as the CRD admits it ([a-z][a-z0-9.:-]*[a-z0-9], domain-scoped ids included).
bool IsProjectId(std::string_view s) {
  if (s.size() < 2 || s.size() > 100 || !Lower(s.front()) || !LowerAlnum(s.back())) return false;
  for (char c : s) {
    if (!LowerAlnum(c) && c != '-' && c != '.' && c != ':') return false;
  }
  return true;
}

// "us-central1": letters, '-', letters, digits.
bool IsRegion(std::string_view s) {
  size_t i = 0;
  auto letters = [&] {
    size_t b = i;
    while (i < s.size() && Lower(s[i])) ++i;
    return i > b;
  };
  if (!letters() || i >= s.size() || s[i++] != '-' || !letters()) return false;
  size_t b = i;
  while (i < s.size() && Digit(s[i])) ++i;
  return i > b && i == s.size();
}

bool IsZone(std::string_view s) {
  size_t dash = s.rfind('-');
  return dash != std::string_view::npos && dash + 2 == s.size() && Lower(s.back()) &&
         IsRegion(s.substr(0, dash));
}

std::vector<std::string_view> Split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  for (size_t a = 0;;) {
    size_t b = s.find(sep, a);
    out.push_back(s.substr(a, b == std::string_view::npos ? std::string_view::npos : b - a));
    if (b == std::string_view::npos) return out;
    a = b + 1;
  }
}

// A Compute URL, full ("https://www.googleapis.com/compute/v1/projects/...") or partial
// ("projects/p/..." or, when `project_optional`, "global/..." / "regions/..."), split into
// segments; empty when it has another host or scheme.
std::vector<std::string_view> ComputePath(std::string_view uri, bool project_optional) {
  for (std::string_view host :
       {"https://www.googleapis.com/compute/", "https://compute.googleapis.com/compute/"}) {
    if (uri.substr(0, host.size()) == host) {
      uri.remove_prefix(host.size());
      size_t slash = uri.find('/');
      std::string_view version = uri.substr(0, slash);
      if (slash == std::string_view::npos ||
          (version != "v1" && version != "beta" && version != "alpha")) {
        return {};
      }
      uri.remove_prefix(slash + 1);
      project_optional = false;  // a full URL names its project
      break;
    }
  }
  std::vector<std::string_view> seg = Split(uri, '/');
  if (seg.size() >= 2 && seg[0] == "projects") {
    if (!IsProjectId(seg[1])) return {};
    seg.erase(seg.begin(), seg.begin() + 2);
  } else if (!project_optional) {
    return {};
  }
  return seg;
}

// ".../global/instanceTemplates/N" or ".../regions/R/instanceTemplates/N".
bool IsTemplateUri(std::string_view uri) {
  auto seg = ComputePath(uri, true);
  if (seg.size() == 3)
    return seg[0] == "global" && seg[1] == "instanceTemplates" && IsGceName(seg[2]);
  return seg.size() == 4 && seg[0] == "regions" && IsRegion(seg[1]) &&
         seg[2] == "instanceTemplates" && IsGceName(seg[3]);
}

// ".../regions/R/subnetworks/N"; `region` receives R.
bool IsSubnetworkUri(std::string_view uri, std::string* region) {
  auto seg = ComputePath(uri, true);
  if (seg.size() != 4 || seg[0] != "regions" || !IsRegion(seg[1]) || seg[2] != "subnetworks" ||
      !IsGceName(seg[3])) {
    return false;
  }
  *region = std::string(seg[1]);
  return true;
}

// ".../global/images/N" or ".../global/images/family/F".
bool IsImageUri(std::string_view uri) {
  auto seg = ComputePath(uri, true);
  if (seg.size() == 3) return seg[0] == "global" && seg[1] == "images" && IsGceName(seg[2]);
  return seg.size() == 4 && seg[0] == "global" && seg[1] == "images" && seg[2] == "family" &&
         IsGceName(seg[3]);
}

// "R", "projects/P/reservations/R" (shared) or "projects/P/zones/Z/reservations/R".
bool IsReservation(std::string_view s) {
  if (IsGceName(s)) return true;
  auto seg = Split(s, '/');
  if (seg.size() == 4) {
    return seg[0] == "projects" && IsProjectId(seg[1]) && seg[2] == "reservations" &&
           IsGceName(seg[3]);
  }
  return seg.size() == 6 && seg[0] == "projects" && IsProjectId(seg[1]) && seg[2] == "zones" &&
         IsZone(seg[3]) && seg[4] == "reservations" && IsGceName(seg[5]);
}

// "default" or local@domain with a dotted domain: the forms GCE takes for serviceAccounts.email.
bool IsServiceAccountEmail(std::string_view s) {
  if (s == "default") return true;
  size_t at = s.find('@');
  if (at == std::string_view::npos || at == 0 || s.size() > 254 ||
      s.find('@', at + 1) != std::string_view::npos) {
    return false;
  }
  for (char c : s.substr(0, at)) {
    if (!Alnum(c) && c != '.' && c != '_' && c != '-' && c != '+') return false;
  }
  std::string_view domain = s.substr(at + 1);
  auto labels = Split(domain, '.');
  if (labels.size() < 2) return false;
  for (std::string_view l : labels) {
    if (l.empty() || l.size() > 63 || !Alnum(l.front()) || !Alnum(l.back())) return false;
    for (char c : l) {
      if (!Alnum(c) && c != '-') return false;
    }
  }
  return true;
}

// An OAuth scope URL as the Compute API takes it: https://www.googleapis.com/auth/<name>.
bool IsScope(std::string_view s) {
  constexpr std::string_view kPrefix = "https://www.googleapis.com/auth/";
  if (s.size() <= kPrefix.size() || s.size() > 256 || s.substr(0, kPrefix.size()) != kPrefix) {
    return false;
  }
  for (char c : s.substr(kPrefix.size())) {
    if (!LowerAlnum(c) && c != '.' && c != '_' && c != '-' && c != '/') return false;
  }
  return true;
}

bool IsIPv4(std::string_view s) {
  auto parts = Split(s, '.');
  if (parts.size() != 4) return false;
  for (std::string_view p : parts) {
    if (p.empty() || p.size() > 3) return false;
    int v = 0;
    for (char c : p) {
      if (!Digit(c)) return false;
      v = v * 10 + (c - '0');
    }
    if (v > 255 || (p.size() > 1 && p[0] == '0')) return false;
  }
  return true;
}

bool IsIPv6(std::string_view s) {
  if (s.size() < 2 || s.size() > 45 || s.find(':') == std::string_view::npos) return false;
  for (char c : s) {
    if (!Digit(c) && !(c >= 'a' && c <= 'f') && !(c >= 'A' && c <= 'F') && c != ':' && c != '.') {
      return false;
    }
  }
  return true;
}

bool IsDnsName(std::string_view s) {
  if (s.empty() || s.size() > 253) return false;
  for (std::string_view l : Split(s, '.')) {
    if (l.empty() || l.size() > 63 || !Alnum(l.front()) || !Alnum(l.back())) return false;
    for (char c : l) {
      if (!Alnum(c) && c != '-') return false;
    }
  }
  return true;
}

// host, host:port, [v6] or [v6]:port, with host an IPv4/IPv6 address or DNS name and port
// 1..65535.
bool IsHostPort(std::string_view s) {
  std::string_view host = s, port;
  if (!s.empty() && s.front() == '[') {
    size_t close = s.find(']');
    if (close == std::string_view::npos) return false;
    host = s.substr(1, close - 1);
    std::string_view rest = s.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return false;
      port = rest.substr(1);
      if (port.empty()) return false;
    }
    if (!IsIPv6(host)) return false;
  } else if (size_t colon = s.find(':'); colon != std::string_view::npos) {
    if (s.find(':', colon + 1) != std::string_view::npos) return IsIPv6(s);  // bare IPv6
    host = s.substr(0, colon);
    port = s.substr(colon + 1);
    if (port.empty()) return false;
  }
  if (!port.empty()) {
    if (port.size() > 5) return false;
    int v = 0;
    for (char c : port) {
      if (!Digit(c)) return false;
      v = v * 10 + (c - '0');
    }
    if (v < 1 || v > 65535) return false;
  }
  return IsIPv4(host) || IsIPv6(host) || IsDnsName(host);
}

// GCE metadata keys: [a-zA-Z0-9-_]{1,128}.
bool IsMetadataKey(std::string_view k) {
  if (k.empty() || k.size() > 128) return false;
  for (char c : k) {
    if (!Alnum(c) && c != '-' && c != '_') return false;
  }
  return true;
}

bool IsReservedMetadataKey(std::string_view k) {
  return k == tpu::kMetaKubeLabels || k == tpu::kMetaStartupScript || k == "startup-script-url" ||
         k == tpu::kMetaTopology || k.substr(0, 8) == "kubeadm-" || k.substr(0, 10) == "hyperslice";
}

void SyntaxProblems(const json::object& spec, std::vector<std::string>& problems) {
  std::string zone(StringField(&spec, "nodeLocation"));
  if (std::string_view uri = StringField(&spec, "instanceTemplateURI");
      !uri.empty() && !IsTemplateUri(uri)) {
    problems.push_back("spec.instanceTemplateURI " + QuoteForMessage(uri) +
                       " is not an instance template URL; write "
                       "projects/<project>/global/instanceTemplates/<name> (or "
                       "projects/<project>/regions/<region>/instanceTemplates/<name>)");
  }
  if (const json::object* ic = ObjectField(&spec, "instanceConfig")) {
    if (std::string_view sub = StringField(ic, "subnetwork"); !sub.empty()) {
      std::string region;
      if (!IsSubnetworkUri(sub, &region)) {
        problems.push_back("spec.instanceConfig.subnetwork " + QuoteForMessage(sub) +
                           " is not a subnetwork URL; write "
                           "projects/<project>/regions/<region>/subnetworks/<name>");
      } else if (auto zone_region = tpu::RegionOfZone(zone);
                 zone_region.ok() && *zone_region != region) {
        problems.push_back("spec.instanceConfig.subnetwork is in region " + region +
                           " but spec.nodeLocation " + zone + " is in " + *zone_region +
                           "; use a subnetwork of region " + *zone_region);
      }
    }
    if (std::string_view image = StringField(ic, "image"); !image.empty() && !IsImageUri(image)) {
      problems.push_back("spec.instanceConfig.image " + QuoteForMessage(image) +
                         " is not an image URL; write projects/<project>/global/images/<image> or "
                         "projects/<project>/global/images/family/<family>");
    }
    if (std::string_view r = StringField(ic, "reservation"); !r.empty() && !IsReservation(r)) {
      problems.push_back("spec.instanceConfig.reservation " + QuoteForMessage(r) +
                         " is not a reservation; write its name (lower-case letters, digits and "
                         "'-', at most 63) or projects/<project>/reservations/<name>");
    }
    if (std::string_view d = StringField(ic, "diskType"); !d.empty() && !IsGceName(d)) {
      problems.push_back("spec.instanceConfig.diskType " + QuoteForMessage(d) +
                         " is not a disk type name; write e.g. hyperdisk-balanced or pd-balanced");
    }
    if (const json::array* accounts = ArrayField(ic, "serviceAccounts")) {
      for (const json::value& a : *accounts) {
        const json::object* acc = a.if_object();
        std::string_view email = StringField(acc, "email");
        if (!IsServiceAccountEmail(email)) {
          problems.push_back("spec.instanceConfig.serviceAccounts[].email " +
                             QuoteForMessage(email) +
                             " is not a service account; write \"default\" or an email such as "
                             "name@project.iam.gserviceaccount.com");
        }
        if (const json::array* scopes = ArrayField(acc, "scopes")) {
          for (const json::value& sc : *scopes) {
            std::string_view scope = sc.is_string() ? std::string_view(sc.get_string()) : "";
            if (!IsScope(scope)) {
              problems.push_back("spec.instanceConfig.serviceAccounts[].scopes " +
                                 QuoteForMessage(scope) +
                                 " is not an OAuth scope URL; write e.g. "
                                 "https://www.googleapis.com/auth/cloud-platform");
            }
          }
        }
      }
    }
    if (const json::array* tags = ArrayField(ic, "networkTags")) {
      std::set<std::string_view> seen;
      for (const json::value& t : *tags) {
        std::string_view tag = t.is_string() ? std::string_view(t.get_string()) : "";
        if (!IsGceName(tag)) {
          problems.push_back("spec.instanceConfig.networkTags " + QuoteForMessage(tag) +
                             " is not a network tag; use lower-case letters, digits and '-', "
                             "starting with a letter, at most 63");
        } else if (!seen.insert(tag).second) {
          problems.push_back("spec.instanceConfig.networkTags lists " + QuoteForMessage(tag) +
                             " twice; list each tag once");
        }
      }
    }
    if (const json::object* md = ObjectField(ic, "metadata")) {
      size_t total = 0;
      for (const auto& [k, v] : *md) {
        std::string_view value = v.is_string() ? std::string_view(v.get_string()) : "";
        total += k.size() + value.size();
        if (!IsMetadataKey(k)) {
          problems.push_back("spec.instanceConfig.metadata key " + QuoteForMessage(k) +
                             " is not a GCE metadata key; use letters, digits, '-' and '_', at "
                             "most 128");
        } else if (IsReservedMetadataKey(k)) {
          problems.push_back("remove spec.instanceConfig.metadata[" + std::string(k) +
                             "]: hyperslice manages kube-labels, startup-script(-url), "
                             "accelerator_topology_id, kubeadm-* and hyperslice* keys");
        }
        if (value.size() > kMetadataValueMaxBytes) {
          problems.push_back("spec.instanceConfig.metadata[" + std::string(k.substr(0, 128)) +
                             "] is " + std::to_string(value.size()) +
                             " bytes; GCE takes at most 262144 (256 KiB) per value");
        }
      }
      if (total > kMetadataTotalMaxBytes - kMetadataReservedBytes) {
        problems.push_back("spec.instanceConfig.metadata totals " + std::to_string(total) +
                           " bytes; keep it under " +
                           std::to_string(kMetadataTotalMaxBytes - kMetadataReservedBytes) +
                           " (GCE's 512 KiB less 64 KiB for what hyperslice adds)");
      }
    }
  }
  if (const json::object* b = ObjectField(&spec, "bootstrapKubernetes")) {
    std::string_view cp = StringField(b, "controlPlaneIP");
    if (!cp.empty() && !IsHostPort(cp)) {
      problems.push_back("spec.bootstrapKubernetes.controlPlaneIP " + QuoteForMessage(cp) +
                         " is not an address; write an IP address or DNS name, optionally with "
                         ":port (e.g. 10.128.0.2 or 10.128.0.2:6443)");
    }
  }
}

}  // namespace

// The shape rules are the operator's own (src/tpu/validation.h: a group that bypassed admission is
// caught there too); the syntax rules above are admission's.
std::vector<std::string> NodeGroupSpecProblems(const json::object& spec) {
  std::vector<std::string> problems = tpu::NodeGroupSpecProblems(spec);
  SyntaxProblems(spec, problems);
  return problems;
}

Decision ValidateNodeGroup(const json::object& request) {
  Decision d;
  std::string_view op = StringField(&request, "operation");
  const json::object* kind = ObjectField(&request, "kind");
  if ((op != "CREATE" && op != "UPDATE") || StringField(kind, "group") != "tpu.google.com" ||
      StringField(kind, "kind") != "TPUNodeGroup" ||
      !StringField(&request, "subResource").empty()) {
    return d;
  }
  const json::object* obj = ObjectField(&request, "object");
  const json::object* spec = ObjectField(obj, "spec");
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
    const json::object* old_spec = ObjectField(ObjectField(&request, "oldObject"), "spec");
    if (old_spec != nullptr && *old_spec == *spec) return d;
  }
  std::vector<std::string> problems = NodeGroupSpecProblems(*spec);
  if (problems.empty()) return d;
  const json::object* meta = ObjectField(obj, "metadata");
  std::string name(StringField(meta, "name"));
  if (name.empty()) name = std::string(StringField(&request, "name"));
  std::string message = "TPUNodeGroup " + std::string(StringField(&request, "namespace")) + "/" +
                        name + " is invalid: ";
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
