// libFuzzer target over the names and labels the TPU operator writes to GCE and to Nodes
// (src/tpu/api.h): GceName, GceLabelValue, KubeLabelValue, NodeGroupLabelValue,
// RenderKubeLabels, IsValidLabelKey/IsValidLabelValue.
//
// Input: fields separated by NUL bytes: group, uid, namespace, then label key/value pairs.
// Invariants: a GCE name matches [a-z]([-a-z0-9]*[a-z0-9])? in at most 63 characters; a GCE
// label value is at most 63 of [a-z0-9_-] and is the input itself when the input already is one;
// Kubernetes label values are valid ones; rendered kube-labels contain only valid keys and
// values, no separator or whitespace injection, and only when every input pair is valid; every
// function is deterministic.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "src/tpu/api.h"

namespace {

namespace tpu = hyperslice::tpu;

void Check(bool ok, const char* what, std::string_view input) {
  if (ok) return;
  std::fprintf(stderr, "labels fuzz: %s (input \"%.*s\")\n", what, static_cast<int>(input.size()),
               input.data());
  std::abort();
}

bool LowerAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

bool IsGceName(std::string_view s) {
  if (s.empty() || s.size() > 63 || !(s.front() >= 'a' && s.front() <= 'z')) return false;
  if (!LowerAlnum(s.back())) return false;
  for (char c : s) {
    if (!LowerAlnum(c) && c != '-') return false;
  }
  return true;
}

bool IsGceLabelValue(std::string_view s) {
  if (s.size() > 63) return false;
  for (char c : s) {
    if (!LowerAlnum(c) && c != '-' && c != '_') return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> f;
  for (size_t a = 0;;) {
    size_t b = in.find('\0', a);
    f.emplace_back(in.substr(a, b == std::string_view::npos ? std::string_view::npos : b - a));
    if (b == std::string_view::npos) break;
    a = b + 1;
  }
  f.resize(std::max<size_t>(f.size(), 3));
  const std::string &group = f[0], &uid = f[1], &ns = f[2];

  for (const char* role : {tpu::kRolePolicy, tpu::kRoleTemplate, tpu::kRoleMig}) {
    std::string name = tpu::GceName(group, role, uid);
    Check(IsGceName(name), "GceName is not a valid GCE name", in);
    Check(name == tpu::GceName(group, role, uid), "GceName not deterministic", in);
  }
  for (const std::string& s : f) {
    std::string v = tpu::GceLabelValue(s);
    Check(IsGceLabelValue(v), "GceLabelValue is not a valid GCE label value", in);
    Check(v == tpu::GceLabelValue(s), "GceLabelValue not deterministic", in);
    if (IsGceLabelValue(s)) Check(v == s, "GceLabelValue changed a valid value", in);
    std::string k = tpu::KubeLabelValue(s);
    Check(tpu::IsValidLabelValue(k), "KubeLabelValue is not a valid label value", in);
    if (tpu::IsValidLabelValue(s)) Check(k == s, "KubeLabelValue changed a valid value", in);
    if (tpu::IsValidLabelValue(s)) {
      Check(s.size() <= 63, "a label value over 63 characters passed", in);
    }
  }
  Check(tpu::IsValidLabelValue(tpu::NodeGroupLabelValue(ns, group)),
        "NodeGroupLabelValue is not a valid label value", in);

  std::map<std::string, std::string> labels;
  bool all_valid = true;
  for (size_t i = 3; i + 1 < f.size(); i += 2) {
    labels[f[i]] = f[i + 1];
  }
  for (const auto& [k, v] : labels) {
    all_valid = all_valid && tpu::IsValidLabelKey(k) && tpu::IsValidLabelValue(v);
  }
  auto rendered = tpu::RenderKubeLabels(labels);
  Check(rendered.ok() == all_valid, "RenderKubeLabels accepts iff every key and value is valid",
        in);
  if (rendered.ok()) {
    const std::string& r = *rendered;
    for (char c : r) {
      Check(c > ' ' && c < 0x7f, "rendered kube-labels hold whitespace or non-ASCII", in);
    }
    size_t pairs = 0;
    for (size_t a = 0; !r.empty() && a <= r.size();) {
      size_t b = r.find(',', a);
      if (b == std::string::npos) b = r.size();
      std::string_view pair(r.data() + a, b - a);
      size_t eq = pair.find('=');
      Check(eq != std::string_view::npos, "a rendered pair without '='", in);
      Check(tpu::IsValidLabelKey(pair.substr(0, eq)) && tpu::IsValidLabelValue(pair.substr(eq + 1)),
            "a rendered pair that is not a valid label", in);
      ++pairs;
      a = b + 1;
    }
    Check(pairs == labels.size(), "rendered pairs differ from the labels", in);
  }
  return 0;
}
