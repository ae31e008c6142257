// The variables of a GPUNodeClass's Talos `machineConfigTemplate` and the template syntax — one
// list for the webhook (which refuses a template using anything else) and the renderer that fills
// them (issue "Ephemeral GPUs 3/4"), so what is admitted is exactly what can be rendered.
//
// Syntax: the subset of Go's text/template that seed 002's example and the reference tgp-operator
// use, a substitution `{{.Name}}`, with Go's spellings around it:
//   {{.Name}}  {{ .Name }}         the value of variable Name
//   {{- .Name}}  {{.Name -}}       also trims the whitespace before / after the action (Go: the
//                                  dash must be separated from the rest by a space, tab or newline)
//   {{/* any */}}  {{- /* */ -}}   a comment: renders nothing
// Everything else inside {{ }} (pipelines, functions, if/range) is refused: a renderer that
// ignored it would boot a machine with a config the user did not write. Text outside actions,
// "}}" included, is literal.
//
// Thread-safe: pure functions over constant data.
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <vector>

#include "src/base/result.h"

namespace hyperslice::gpu {

// ARCHITECTURE.md §8 "Joining": Talos cluster secrets (MachineToken, ClusterCA, ClusterID,
// ClusterSecret, from talosConfig.clusterSecretsRef), the cluster (ControlPlaneEndpoint,
// ClusterName), the mesh (TailscaleAuthKey), the machine (NodeName, NodePool, NodeIndex) and what a
// kubelet joining by TLS bootstrap needs (KubernetesBootstrapToken, KubernetesCA).
inline constexpr std::array<std::string_view, 12> kTemplateVars = {"MachineToken",
                                                                   "ClusterCA",
                                                                   "ClusterID",
                                                                   "ClusterSecret",
                                                                   "ControlPlaneEndpoint",
                                                                   "ClusterName",
                                                                   "TailscaleAuthKey",
                                                                   "NodeName",
                                                                   "NodePool",
                                                                   "NodeIndex",
                                                                   "KubernetesBootstrapToken",
                                                                   "KubernetesCA"};

bool IsTemplateVar(std::string_view name);
// "MachineToken, ClusterCA, ..." for messages.
std::string TemplateVarList();

// One piece of a parsed template, in order. `text` points into the parsed string.
struct TemplatePart {
  enum class Kind { kText, kVariable };
  Kind kind = Kind::kText;
  std::string_view text;  // literal text (trim markers applied), or the variable's name
  int line = 1;           // where the piece starts (1-based), for messages
};

// Splits a template into literal text and variable references; comments are dropped and trim
// markers applied, so rendering is concatenating the parts with each variable's value. Variable
// names are not checked here (IsTemplateVar). Errors: kInvalidArgument, the message starting with
// "line N: " and saying what to write instead (an unclosed "{{", an action that is not a variable).
Result<std::vector<TemplatePart>> ParseTemplate(std::string_view tmpl);

}  // namespace hyperslice::gpu
