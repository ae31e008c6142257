#include "src/kube/yaml.h"

#include <exception>
#include <string>

namespace hyperslice::kube {
namespace json = boost::json;

json::value YamlToJson(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map: {
      json::object o;
      for (const auto& kv : node) o[kv.first.as<std::string>()] = YamlToJson(kv.second);
      return o;
    }
    case YAML::NodeType::Sequence: {
      json::array a;
      for (const auto& v : node) a.push_back(YamlToJson(v));
      return a;
    }
    case YAML::NodeType::Scalar: {
      const std::string& s = node.Scalar();
      if (node.Tag() == "!") return json::string(s);  // quoted: always a string
      if (s == "true") return true;
      if (s == "false") return false;
      if (s == "null" || s == "~") return nullptr;
      if (!s.empty() && s.find_first_not_of("-0123456789") == std::string::npos && s != "-") {
        try {
          return std::stoll(s);
        } catch (const std::exception&) {  // out of range or "1-2": a string then
        }
      }
      return json::string(s);
    }
    default:
      return nullptr;
  }
}

Result<std::vector<Object>> ObjectsFromYaml(const std::string& text) {
  std::vector<Object> out;
  try {
    for (const YAML::Node& doc : YAML::LoadAll(text)) {
      if (doc.IsMap()) out.push_back(YamlToJson(doc).as_object());
    }
  } catch (const YAML::Exception& e) {
    return Error::Make(Error::Code::kInvalidArgument, std::string("invalid YAML: ") + e.what());
  }
  return out;
}

}  // namespace hyperslice::kube
