// Talos machine configs for rented GPU machines (issue "Ephemeral GPUs 3/4", item 1): filling a
// GPUNodeClass's `machineConfigTemplate` (syntax and variables: template_vars.h), the default
// worker template, and a checker of what Talos would refuse, run before anything is rented.
//
// Rendering — where a value goes decides how it is written, so a value can never change the
// document's structure:
//   - the variable is a whole plain scalar (`key: {{.X}}`, `- {{.X}}`, nothing but spaces or a
//     comment after it on the line): the value is written as a YAML double-quoted string, escaped
//     (a raw multi-line PEM stays one string). Unlike Go's text/template, which inserts verbatim,
//     the value is therefore always a string, never a number or boolean: every one of the 12
//     variables is a string, and every Talos field they go into takes one.
//   - anywhere else (inside a longer scalar, quotes the template wrote, a block scalar): verbatim,
//     as text/template does; a value holding a line break or other control character there is an
//     error, as it would end the scalar or break the block's indentation.
//   A value that is not UTF-8 is an error anywhere (YAML is Unicode text).
//
// Checking (CheckTalosConfig) — a subset of what Talos's own loader and validator
// (github.com/siderolabs/talos/pkg/machinery v1.13.6: configloader.NewFromBytes, strict, then
// Validate in cloud mode) refuse, plus what only fails at boot, with no Go at run time:
//   - YAML that does not parse;
//   - `version: v1alpha1` documents: keys Talos does not know at the top level, under `machine`
//     and under `cluster` (allow-lists from config/types/v1alpha1/v1alpha1_types.go v1.13.6:
//     Config, MachineConfig, ClusterConfig); `machine.type` missing or not `worker` (a rented GPU
//     machine joins as a worker); `machine.files[].path` outside `/var` (Talos's root is
//     read-only: such a file fails at boot, not at load);
//   - `ExtensionServiceConfig` and `HostnameConfig` documents: keys Talos does not know (from
//     config/types/runtime/extensions/service_config.go and config/types/network/hostname.go).
//   Documents of other kinds are not checked. Tests hold the checker to Talos's own (built by
//   scripts/build-talos-checker.sh): both refuse seed 002's template naming the same keys.
//
// Thread-safe: pure functions over constant data.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "src/base/result.h"

namespace hyperslice::gpu {

using TemplateValues = std::map<std::string, std::string, std::less<>>;

// Fills `tmpl` from `values`. Errors (kInvalidArgument, naming the variable and its line): a
// variable not in kTemplateVars, one with no value in `values`, a value with a line break or
// control character where it would be inserted verbatim; template syntax errors as ParseTemplate
// reports.
Result<std::string> RenderTalosTemplate(std::string_view tmpl, const TemplateValues& values);

// The default worker template (deploy/examples/talos-worker.yaml.tmpl, embedded at build time):
// machine.type worker, the Talos and Kubernetes tokens and CAs, the control plane endpoint, the
// pool's node label, the hostname (a HostnameConfig document) and Tailscale as the `tailscale`
// extension service (an ExtensionServiceConfig with TS_AUTHKEY and TS_EXTRA_ARGS).
std::string_view DefaultTalosTemplate();

// Values of the right shape for every variable (base64 CAs, tokens in Talos's and Kubernetes's
// formats, an https endpoint), with no secret in them: what a template is checked with before any
// real secret exists.
TemplateValues PlaceholderTemplateValues();

// What Talos would refuse in a rendered config, one message per refusal naming the key or path
// ("unknown key machine.systemd", ...); empty when accepted. See the header comment for the scope.
std::vector<std::string> CheckTalosConfig(std::string_view yaml);

// The keys CheckTalosConfig knows in a section ("config" for the top level, "machine",
// "cluster", "ExtensionServiceConfig", "HostnameConfig"; empty for another): tests hold them to
// the Go types of the pinned Talos version (talos-checker --keys).
std::vector<std::string_view> TalosKnownKeys(std::string_view section);

// The class controller's check of a template: rendered with PlaceholderTemplateValues, then
// CheckTalosConfig. An error (kInvalidArgument) when it does not render; otherwise the refusals.
Result<std::vector<std::string>> CheckTalosTemplate(std::string_view tmpl);

}  // namespace hyperslice::gpu
