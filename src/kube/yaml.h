// YAML manifests as Kubernetes objects: what `kubectl apply -f` does to a file before it talks to
// the apiserver. Used by `hyperslice dev` (CRDs, examples) and by tests that apply deploy/.
//
// Scalars follow YAML 1.2's core schema as far as manifests need it: true/false, null/~,
// integers; a quoted scalar is always a string; anything else (including floats) stays a string,
// which is what the apiserver's schemas expect for the fields we write. Thread-safe.
#pragma once

#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>
#include <boost/json/value.hpp>

#include "src/base/result.h"
#include "src/kube/resource.h"

namespace hyperslice::kube {

// One YAML node as JSON.
boost::json::value YamlToJson(const YAML::Node& node);

// Every non-empty document of `text` that is a mapping (a multi-document manifest); errors are
// kInvalidArgument with yaml-cpp's message.
Result<std::vector<Object>> ObjectsFromYaml(const std::string& text);

}  // namespace hyperslice::kube
