// Reading a YAML manifest file from deploy/ in a test: every document that is a map, as JSON (the
// shape the kube client sends). Header-only; needs yaml-cpp.
#pragma once

#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include <boost/json.hpp>

#include "src/kube/yaml.h"

namespace hyperslice::testenv {

// The file's map documents in order; throws YAML::Exception when it cannot be read or parsed.
inline std::vector<boost::json::object> YamlFileDocs(const std::string& path) {
  std::vector<boost::json::object> out;
  for (const YAML::Node& doc : YAML::LoadAllFromFile(path)) {
    if (doc.IsMap()) out.push_back(kube::YamlToJson(doc).as_object());
  }
  return out;
}

}  // namespace hyperslice::testenv
