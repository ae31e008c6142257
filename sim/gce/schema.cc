// The Compute v1 API definition from compute.proto (pinned @google-cloud/compute npm package),
// parsed at start with libprotobuf's compiler::Importer: rpc routes from google.api.http options,
// body messages, and request-body validation the way GCE's front end rejects bad JSON.
//
// compute.proto declares most enums as `string` fields with a sibling nested enum named after the
// field ("mode" -> enum Mode); such strings are checked against that enum's values, as GCE does.
#include <google/protobuf/compiler/importer.h>
#include <google/protobuf/descriptor.h>
#include <google/protobuf/dynamic_message.h>
#include <google/protobuf/util/json_util.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <set>

#include "sim/gce/internal.h"

namespace hyperslice::sim::gce::internal {
namespace {

namespace pb = google::protobuf;

class Collector : public pb::compiler::MultiFileErrorCollector {
 public:
  void AddError(const std::string& file, int line, int column,
                const std::string& message) override {
    if (errors.size() < 10) {
      errors += file + ":" + std::to_string(line + 1) + ":" + std::to_string(column + 1) + ": " +
                message + "\n";
    }
  }
  std::string errors;
};

std::string LowerFirst(std::string s) {
  if (!s.empty()) s[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(s[0])));
  return s;
}

std::string CamelCase(const std::string& snake) {
  std::string out;
  bool up = true;
  for (char c : snake) {
    if (c == '_') {
      up = true;
    } else {
      out += up ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c;
      up = false;
    }
  }
  return out;
}

std::string TypeName(const pb::FieldDescriptor* f) {
  if (f->type() == pb::FieldDescriptor::TYPE_MESSAGE) {
    return "type.googleapis.com/" + f->message_type()->full_name();
  }
  if (f->type() == pb::FieldDescriptor::TYPE_ENUM) {
    return "type.googleapis.com/" + f->enum_type()->full_name();
  }
  std::string t = f->type_name();
  for (auto& c : t) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return "TYPE_" + t;
}

class Walker {
 public:
  std::vector<std::pair<std::string, std::string>> violations;  // field, description

  void Message(const json::value& v, const pb::Descriptor* d, const std::string& path) {
    if (!v.is_object()) {
      Add(path, "Invalid value at '" + path + "' (type.googleapis.com/" + d->full_name() + "), " +
                    json::serialize(v));
      return;
    }
    for (const auto& [k, val] : v.as_object()) {
      std::string key(k);
      const pb::FieldDescriptor* f = d->FindFieldByName(key);
      for (int i = 0; f == nullptr && i < d->field_count(); ++i) {
        if (d->field(i)->json_name() == key) f = d->field(i);
      }
      if (f == nullptr) {
        Add(path, "Invalid JSON payload received. Unknown name \"" + key + "\" at '" + path +
                      "': Cannot find field.");
        continue;
      }
      if (val.is_null()) continue;
      std::string fpath = path + "." + f->name();
      if (f->is_map()) {
        if (!val.is_object()) {
          Add(fpath,
              "Invalid value at '" + fpath + "' (" + TypeName(f) + "), " + json::serialize(val));
          continue;
        }
        const pb::FieldDescriptor* value_field = f->message_type()->map_value();
        for (const auto& [mk, mv] : val.as_object()) {
          Single(value_field, d, mv, fpath + "[" + std::string(mk) + "]");
        }
      } else if (f->is_repeated()) {
        if (!val.is_array()) {
          Add(fpath,
              "Invalid value at '" + fpath + "' (" + TypeName(f) + "), " + json::serialize(val));
          continue;
        }
        const auto& arr = val.as_array();
        for (size_t i = 0; i < arr.size(); ++i) {
          Single(f, d, arr[i], fpath + "[" + std::to_string(i) + "]");
        }
      } else {
        if (val.is_array()) {
          Add(fpath,
              "Invalid JSON payload received. Proto field is not repeating, cannot start "
              "list.");
          continue;
        }
        Single(f, d, val, fpath);
      }
      if (violations.size() >= 20) return;
    }
  }

 private:
  void Add(const std::string& field, const std::string& description) {
    violations.emplace_back(field, description);
  }

  void Bad(const pb::FieldDescriptor* f, const json::value& v, const std::string& path) {
    Add(path, "Invalid value at '" + path + "' (" + TypeName(f) + "), " + json::serialize(v));
  }

  static bool IntegerString(const json::string& s) {
    if (s.empty()) return false;
    size_t i = s[0] == '-' ? 1 : 0;
    if (i == s.size()) return false;
    for (; i < s.size(); ++i) {
      if (s[i] < '0' || s[i] > '9') return false;
    }
    return true;
  }

  void Single(const pb::FieldDescriptor* f, const pb::Descriptor* parent, const json::value& v,
              const std::string& path) {
    using FD = pb::FieldDescriptor;
    if (v.is_null()) return;
    switch (f->cpp_type()) {
      case FD::CPPTYPE_MESSAGE:
        Message(v, f->message_type(), path);
        return;
      case FD::CPPTYPE_STRING: {
        if (!v.is_string()) return Bad(f, v, path);
        if (f->type() == FD::TYPE_BYTES) return;
        // A string standing for an enum: the nested enum named after the field.
        const pb::EnumDescriptor* e = parent->FindEnumTypeByName(CamelCase(f->name()));
        if (e != nullptr) {
          std::string s(v.as_string());
          const pb::EnumValueDescriptor* ev = e->FindValueByName(s);
          if (ev == nullptr || s.rfind("UNDEFINED_", 0) == 0) {
            Add(path, "Invalid value at '" + path + "' (type.googleapis.com/" + e->full_name() +
                          "), " + json::serialize(v));
          }
        }
        return;
      }
      case FD::CPPTYPE_BOOL:
        if (!v.is_bool()) Bad(f, v, path);
        return;
      case FD::CPPTYPE_INT32:
      case FD::CPPTYPE_INT64:
      case FD::CPPTYPE_UINT32:
      case FD::CPPTYPE_UINT64:
        if (v.is_int64() || v.is_uint64()) return;
        if (v.is_double() &&
            v.as_double() == static_cast<double>(static_cast<int64_t>(v.as_double()))) {
          return;
        }
        if (v.is_string() && IntegerString(v.as_string())) return;
        return Bad(f, v, path);
      case FD::CPPTYPE_DOUBLE:
      case FD::CPPTYPE_FLOAT:
        if (v.is_number()) return;
        if (v.is_string()) return;  // "NaN", "Infinity", "1.5": left to the proto parser
        return Bad(f, v, path);
      case FD::CPPTYPE_ENUM:
        if (v.is_int64() || v.is_uint64()) return;
        if (v.is_string() &&
            f->enum_type()->FindValueByName(std::string(v.as_string())) != nullptr) {
          return;
        }
        return Bad(f, v, path);
    }
  }
};

class ApiSchemaImpl final : public ApiSchema {
 public:
  Status Load(const std::string& proto_dir) {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (!fs::exists(fs::path(proto_dir) / "google/cloud/compute/v1/compute.proto", ec)) {
      return Error::Make(Error::Code::kNotFound,
                         "gce sim: no google/cloud/compute/v1/compute.proto under '" + proto_dir +
                             "' (run scripts/gce-schema.sh and pass its output as the proto "
                             "folder or in HYPERSLICE_GCE_PROTO_DIR)");
    }
    tree_.MapPath("", proto_dir);
    // google/api/*.proto ship in google-gax next to the compute package.
    fs::path gax = fs::path(proto_dir) / "../../../../google-gax/build/protos";
    if (fs::exists(gax / "google/api/annotations.proto", ec))
      tree_.MapPath("", gax.lexically_normal());
    tree_.MapPath("", "/usr/include");
    importer_ = std::make_unique<pb::compiler::Importer>(&tree_, &collector_);
    const pb::FileDescriptor* file = importer_->Import("google/cloud/compute/v1/compute.proto");
    if (file == nullptr) {
      return Error::Make(Error::Code::kInvalidArgument,
                         "gce sim: compute.proto did not parse:\n" + collector_.errors);
    }
    const pb::DescriptorPool* pool = importer_->pool();
    const pb::FieldDescriptor* http = pool->FindExtensionByName("google.api.http");
    const pb::Descriptor* method_options =
        pool->FindMessageTypeByName("google.protobuf.MethodOptions");
    if (http == nullptr || method_options == nullptr) {
      return Error::Make(Error::Code::kInvalidArgument,
                         "gce sim: google.api.http is not defined by compute.proto's imports");
    }
    factory_ = std::make_unique<pb::DynamicMessageFactory>(pool);
    for (int s = 0; s < file->service_count(); ++s) {
      const pb::ServiceDescriptor* svc = file->service(s);
      for (int m = 0; m < svc->method_count(); ++m) {
        const pb::MethodDescriptor* md = svc->method(m);
        // The options carry google.api.http as an extension the generated MethodOptions does not
        // know; re-parse them as the pool's own MethodOptions to read it.
        std::unique_ptr<pb::Message> opts(factory_->GetPrototype(method_options)->New());
        if (!opts->ParseFromString(md->options().SerializeAsString())) continue;
        const pb::Reflection* refl = opts->GetReflection();
        if (!refl->HasField(*opts, http)) continue;
        const pb::Message& rule = refl->GetMessage(*opts, http, factory_.get());
        const pb::Reflection* rr = rule.GetReflection();
        Rpc rpc;
        rpc.id = "compute." + LowerFirst(svc->name()) + "." + LowerFirst(md->name());
        for (const char* verb : {"get", "put", "post", "delete", "patch"}) {
          const pb::FieldDescriptor* f = rule.GetDescriptor()->FindFieldByName(verb);
          if (f != nullptr && rr->HasField(rule, f)) {
            rpc.http_method = verb;
            for (auto& c : rpc.http_method) c = static_cast<char>(std::toupper(c));
            rpc.path_template = rr->GetString(rule, f);
          }
        }
        if (const pb::FieldDescriptor* b = rule.GetDescriptor()->FindFieldByName("body")) {
          rpc.body_field = rr->GetString(rule, b);
        }
        const pb::Descriptor* body = nullptr;
        if (!rpc.body_field.empty() && rpc.body_field != "*") {
          const pb::FieldDescriptor* bf = md->input_type()->FindFieldByName(rpc.body_field);
          if (bf != nullptr && bf->message_type() != nullptr) {
            body = bf->message_type();
            rpc.body_type = body->full_name();
          }
        }
        bodies_[rpc.id] = body;
        rpcs_[rpc.id] = std::move(rpc);
      }
    }
    if (rpcs_.empty()) {
      return Error::Make(Error::Code::kInvalidArgument, "gce sim: compute.proto has no routes");
    }
    return OkStatus();
  }

  const Rpc* Find(const std::string& rpc_id) const override {
    auto it = rpcs_.find(rpc_id);
    return it == rpcs_.end() ? nullptr : &it->second;
  }
  size_t rpc_count() const override { return rpcs_.size(); }

  std::optional<ApiError> ValidateBody(const std::string& rpc_id,
                                       std::string_view body) const override {
    auto it = bodies_.find(rpc_id);
    if (it == bodies_.end() || it->second == nullptr) return std::nullopt;
    const pb::Descriptor* d = it->second;
    std::string top = rpcs_.at(rpc_id).body_field;
    if (top.size() > 9 && top.compare(top.size() - 9, 9, "_resource") == 0) {
      top.resize(top.size() - 9);
    }
    boost::system::error_code ec;
    json::value v = json::parse(body, ec);
    if (ec) {
      return Invalid("Invalid JSON payload received. Unexpected token.\n" +
                     std::string(body.substr(0, 64)) + "\n^ (" + ec.message() + ")");
    }
    if (!v.is_object()) {
      return Invalid("Invalid JSON payload received. Expected an object at '" + top + "'.", top);
    }
    Walker w;
    w.Message(v, d, top);
    if (!w.violations.empty()) {
      std::string message;
      json::array fv;
      for (const auto& [field, desc] : w.violations) {
        if (!message.empty()) message += "\n";
        message += desc;
        fv.push_back(json::object{{"field", field}, {"description", desc}});
      }
      ApiError e = Invalid(message);
      e.details.push_back(json::object{{"@type", "type.googleapis.com/google.rpc.BadRequest"},
                                       {"fieldViolations", std::move(fv)}});
      return e;
    }
    // The proto parser has the last word (integer ranges, number formats).
    std::unique_ptr<pb::Message> msg(factory_->GetPrototype(d)->New());
    pb::util::JsonParseOptions opts;
    opts.ignore_unknown_fields = false;
    auto status =
        pb::util::JsonStringToMessage(pb::StringPiece(body.data(), body.size()), msg.get(), opts);
    if (!status.ok()) {
      return Invalid(
          "Invalid JSON payload received. " + std::string(status.message()) + " at '" + top + "'.",
          top);
    }
    return std::nullopt;
  }

 private:
  pb::compiler::DiskSourceTree tree_;
  Collector collector_;
  std::unique_ptr<pb::compiler::Importer> importer_;
  std::unique_ptr<pb::DynamicMessageFactory> factory_;
  std::map<std::string, Rpc> rpcs_;
  std::map<std::string, const pb::Descriptor*> bodies_;
};

}  // namespace

Result<std::unique_ptr<ApiSchema>> ApiSchema::Load(const std::string& proto_dir) {
  auto schema = std::make_unique<ApiSchemaImpl>();
  HS_RETURN_IF_ERROR(schema->Load(proto_dir));
  return std::unique_ptr<ApiSchema>(std::move(schema));
}

Result<std::shared_ptr<const ApiSchema>> SharedApiSchema(const std::string& proto_dir) {
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<const ApiSchema>> cache;
  std::lock_guard lock(mu);
  if (auto it = cache.find(proto_dir); it != cache.end()) return it->second;
  auto schema = ApiSchema::Load(proto_dir);
  if (!schema.ok()) return schema.error();
  std::shared_ptr<const ApiSchema> shared(std::move(schema).value());
  cache[proto_dir] = shared;
  return shared;
}

std::string DefaultProtoDir() {
  if (const char* env = std::getenv("HYPERSLICE_GCE_PROTO_DIR"); env != nullptr && *env) return env;
  std::string cache;
  if (const char* c = std::getenv("HYPERSLICE_CACHE"); c != nullptr && *c) {
    cache = c;
  } else if (const char* home = std::getenv("HOME"); home != nullptr && *home) {
    cache = std::string(home) + "/.cache/hyperslice";
  } else {
    cache = "/root/.cache/hyperslice";
  }
  // Keep in step with COMPUTE_NPM_VERSION in scripts/gce-schema.sh.
  return cache + "/npm/compute-7.8.0/node_modules/@google-cloud/compute/build/protos";
}

}  // namespace hyperslice::sim::gce::internal
