#include "src/runners/controlnode/pod_request.h"

#include <algorithm>
#include <map>
#include <set>

#include <boost/json.hpp>

#include "src/base/base64.h"
#include "src/base/json.h"
#include "src/kube/scheduling.h"
#include "src/kube/store.h"
#include "src/runners/controlnode/api.h"

namespace hyperslice::runners::controlnode {
namespace {

namespace json = boost::json;
using jsonfield::ArrayField;
using jsonfield::BoolField;
using jsonfield::IntField;
using jsonfield::ObjectField;
using jsonfield::StringField;
using jsonfield::StringValue;

Error Refuse(const std::string& reason, const std::string& message) {
  return Error::Make(Error::Code::kInvalidArgument, message, reason);
}
Error Missing(const std::string& message) {
  return Error::Make(Error::Code::kNotFound, message, "CreateContainerConfigError");
}

const json::object& Empty() {
  static const json::object e;
  return e;
}

// A Secret's or ConfigMap's entries, decoded: {key -> bytes}.
Result<std::map<std::string, std::string>> DataOf(const kube::Object& obj, bool secret) {
  std::map<std::string, std::string> out;
  if (const json::object* data = ObjectField(obj, "data")) {
    for (const auto& [k, v] : *data) {
      if (!v.is_string()) continue;
      std::string_view text(v.as_string().data(), v.as_string().size());
      if (secret) {
        auto d = Base64Decode(text, "secret data");
        if (!d.ok()) return d.error();
        out[std::string(k)] = std::move(*d);
      } else {
        out[std::string(k)] = std::string(text);
      }
    }
  }
  if (!secret) {
    if (const json::object* bin = ObjectField(obj, "binaryData")) {
      for (const auto& [k, v] : *bin) {
        if (!v.is_string()) continue;
        auto d = Base64Decode(std::string_view(v.as_string().data(), v.as_string().size()),
                              "configmap binaryData");
        if (!d.ok()) return d.error();
        out[std::string(k)] = std::move(*d);
      }
    }
  }
  if (secret) {
    if (const json::object* sd = ObjectField(obj, "stringData")) {
      for (const auto& [k, v] : *sd) {
        if (v.is_string()) out[std::string(k)] = std::string(v.as_string());
      }
    }
  }
  return out;
}

class Resolver {
 public:
  Resolver(const kube::Object& pod, PodInputs& inputs, std::string node_name, std::string host_ip)
      : pod_(pod), inputs_(inputs), node_(std::move(node_name)), host_ip_(std::move(host_ip)) {
    ns_ = std::string(kube::MetaString(pod, "namespace"));
  }

  // nullopt when optional and absent.
  Result<std::optional<std::map<std::string, std::string>>> Source(bool secret,
                                                                   const std::string& name,
                                                                   bool optional) {
    std::string key = (secret ? "s/" : "c/") + name;
    if (auto it = cache_.find(key); it != cache_.end()) {
      return std::optional<std::map<std::string, std::string>>(it->second);
    }
    auto obj = secret ? inputs_.Secret(ns_, name) : inputs_.ConfigMap(ns_, name);
    if (!obj.ok()) {
      if (obj.error().code == Error::Code::kNotFound) {
        if (optional) return std::optional<std::map<std::string, std::string>>();
        return Missing(std::string(secret ? "secret" : "configmap") + " \"" + name +
                       "\" not found");
      }
      return obj.error();
    }
    HS_ASSIGN_OR_RETURN(auto data, DataOf(*obj, secret));
    cache_[key] = data;
    return std::optional<std::map<std::string, std::string>>(std::move(data));
  }

  Result<std::optional<std::string>> KeyRef(bool secret, const json::object& ref) {
    std::string name = StringValue(ref, "name");
    std::string key = StringValue(ref, "key");
    bool optional = BoolField(ref, "optional").value_or(false);
    HS_ASSIGN_OR_RETURN(auto data, Source(secret, name, optional));
    if (!data) return std::optional<std::string>();
    auto it = data->find(key);
    if (it == data->end()) {
      if (optional) return std::optional<std::string>();
      return Missing(std::string("couldn't find key ") + key + " in " +
                     (secret ? "Secret " : "ConfigMap ") + ns_ + "/" + name);
    }
    return std::optional<std::string>(it->second);
  }

  // metadata.name, metadata.labels['k'], spec.nodeName, status.hostIP, ...
  Result<std::string> FieldRef(const json::object& ref) {
    std::string path = StringValue(ref, "fieldPath");
    const json::object& meta =
        ObjectField(pod_, "metadata") ? *ObjectField(pod_, "metadata") : Empty();
    const json::object& spec = ObjectField(pod_, "spec") ? *ObjectField(pod_, "spec") : Empty();
    auto bracket = [&](const char* prefix, const char* field) -> std::optional<std::string> {
      std::string p = prefix;
      if (path.rfind(p, 0) != 0 || path.back() != ']') return std::nullopt;
      std::string k = path.substr(p.size(), path.size() - p.size() - 1);
      if (k.size() >= 2 && (k.front() == '\'' || k.front() == '"')) k = k.substr(1, k.size() - 2);
      const json::object* m = ObjectField(meta, field);
      return m != nullptr ? StringValue(*m, k) : std::string();
    };
    if (path == "metadata.name") return StringValue(meta, "name");
    if (path == "metadata.namespace") return StringValue(meta, "namespace");
    if (path == "metadata.uid") return StringValue(meta, "uid");
    if (path == "spec.nodeName") return node_;
    if (path == "spec.serviceAccountName") return StringValue(spec, "serviceAccountName");
    if (path == "status.hostIP") return host_ip_;
    if (auto v = bracket("metadata.labels[", "labels")) return *v;
    if (auto v = bracket("metadata.annotations[", "annotations")) return *v;
    if (path == "metadata.labels" || path == "metadata.annotations") {
      const json::object* m =
          ObjectField(meta, path == "metadata.labels" ? "labels" : "annotations");
      std::string out;
      if (m != nullptr) {
        for (const auto& [k, v] : *m) {
          if (v.is_string()) out += std::string(k) + "=\"" + std::string(v.as_string()) + "\"\n";
        }
      }
      return out;
    }
    return Refuse("UnsupportedField", "fieldRef " + path +
                                          " cannot be resolved by a control node (the pod IP is "
                                          "known only once the runner has started it)");
  }

  Result<std::string> ResourceFieldRef(const json::object& ref, const json::object& container) {
    std::string res = StringValue(ref, "resource");
    std::string c = StringValue(ref, "containerName");
    const json::object* target = &container;
    if (!c.empty() && c != StringValue(container, "name")) {
      target = nullptr;
      if (const json::object* spec = ObjectField(pod_, "spec")) {
        for (const char* list : {"containers", "initContainers"}) {
          if (const json::array* cs = ArrayField(*spec, list)) {
            for (const auto& v : *cs) {
              if (v.is_object() && StringField(v.as_object(), "name") == c) target = &v.as_object();
            }
          }
        }
      }
      if (target == nullptr)
        return Refuse("UnsupportedField", "resourceFieldRef: no container " + c);
    }
    if (auto d = StringField(ref, "divisor"); !d.empty() && d != "1" && d != "0") {
      return Refuse("UnsupportedField",
                    "resourceFieldRef divisor " + std::string(d) + " is not supported");
    }
    auto dot = res.find('.');
    if (dot == std::string::npos) return Refuse("UnsupportedField", "resourceFieldRef " + res);
    const json::object* resources = ObjectField(*target, "resources");
    const json::object* m =
        resources != nullptr ? ObjectField(*resources, res.substr(0, dot)) : nullptr;
    std::string v(StringField(m, res.substr(dot + 1)));
    if (v.empty()) return std::string("0");
    auto q = kube::Quantity::Parse(v);
    if (!q.ok()) return q.error();
    return std::to_string(q->Value());
  }

  Status Env(const json::object& c, v1::Container& out) {
    std::map<std::string, std::string> seen;  // later wins, as in the kubelet
    std::vector<std::string> order;
    auto put = [&](const std::string& k, std::string v) {
      if (!seen.count(k)) order.push_back(k);
      seen[k] = std::move(v);
    };
    if (const json::array* from = ArrayField(c, "envFrom")) {
      for (const auto& fv : *from) {
        if (!fv.is_object()) continue;
        const json::object& f = fv.as_object();
        std::string prefix = StringValue(f, "prefix");
        for (bool secret : {false, true}) {
          const json::object* ref = ObjectField(f, secret ? "secretRef" : "configMapRef");
          if (ref == nullptr) continue;
          HS_ASSIGN_OR_RETURN(auto data, Source(secret, StringValue(*ref, "name"),
                                                BoolField(*ref, "optional").value_or(false)));
          if (!data) continue;
          for (const auto& [k, v] : *data) put(prefix + k, v);
        }
      }
    }
    if (const json::array* env = ArrayField(c, "env")) {
      for (const auto& ev : *env) {
        if (!ev.is_object()) continue;
        const json::object& e = ev.as_object();
        std::string name = StringValue(e, "name");
        const json::object* vf = ObjectField(e, "valueFrom");
        if (vf == nullptr) {
          put(name, StringValue(e, "value"));
          continue;
        }
        if (const json::object* r = ObjectField(*vf, "secretKeyRef")) {
          HS_ASSIGN_OR_RETURN(auto v, KeyRef(true, *r));
          if (v) put(name, *v);
        } else if (const json::object* r2 = ObjectField(*vf, "configMapKeyRef")) {
          HS_ASSIGN_OR_RETURN(auto v, KeyRef(false, *r2));
          if (v) put(name, *v);
        } else if (const json::object* r3 = ObjectField(*vf, "fieldRef")) {
          HS_ASSIGN_OR_RETURN(std::string v, FieldRef(*r3));
          put(name, v);
        } else if (const json::object* r4 = ObjectField(*vf, "resourceFieldRef")) {
          HS_ASSIGN_OR_RETURN(std::string v, ResourceFieldRef(*r4, c));
          put(name, v);
        } else {
          return Refuse("UnsupportedField", "env " + name + ": unsupported valueFrom");
        }
      }
    }
    for (const auto& k : order) {
      v1::EnvVar* ev = out.add_env();
      ev->set_name(k);
      ev->set_value(seen[k]);
    }
    return OkStatus();
  }

  static uint32_t Mode(const json::object& o, uint32_t dflt) {
    auto m = IntField(o, "mode");
    return m ? static_cast<uint32_t>(*m) : dflt;
  }

  // Secret/ConfigMap entries as files (all keys, or `items` with paths and modes).
  Status KeyFiles(bool secret, const json::object& src, uint32_t default_mode,
                  v1::Volume::Files& files) {
    std::string name = StringValue(src, secret ? "secretName" : "name");
    if (secret && name.empty()) name = StringValue(src, "name");
    bool optional = BoolField(src, "optional").value_or(false);
    HS_ASSIGN_OR_RETURN(auto data, Source(secret, name, optional));
    if (!data) return OkStatus();
    if (const json::array* items = ArrayField(src, "items"); items != nullptr && !items->empty()) {
      for (const auto& iv : *items) {
        if (!iv.is_object()) continue;
        const json::object& it = iv.as_object();
        std::string key = StringValue(it, "key");
        auto d = data->find(key);
        if (d == data->end()) {
          if (optional) continue;
          std::string msg = "couldn't find key " + key;
          msg += secret ? " in Secret " : " in ConfigMap ";
          msg += ns_ + "/" + name;
          return Missing(msg);
        }
        HS_RETURN_IF_ERROR(
            AddFile(files, StringValue(it, "path"), d->second, Mode(it, default_mode)));
      }
      return OkStatus();
    }
    for (const auto& [k, v] : *data) HS_RETURN_IF_ERROR(AddFile(files, k, v, default_mode));
    return OkStatus();
  }

  static Status AddFile(v1::Volume::Files& files, const std::string& path, const std::string& data,
                        uint32_t mode) {
    if (path.empty() || path.front() == '/' || path.find("..") != std::string::npos) {
      return Refuse("UnsupportedField", "volume file path \"" + path + "\" is not relative");
    }
    v1::VolumeFile* f = files.add_files();
    f->set_path(path);
    f->set_content(data);
    f->set_mode(mode);
    return OkStatus();
  }

  Status DownwardFiles(const json::object& src, uint32_t default_mode, v1::Volume::Files& files) {
    if (const json::array* items = ArrayField(src, "items")) {
      for (const auto& iv : *items) {
        if (!iv.is_object()) continue;
        const json::object& it = iv.as_object();
        std::string value;
        if (const json::object* fr = ObjectField(it, "fieldRef")) {
          HS_ASSIGN_OR_RETURN(value, FieldRef(*fr));
        } else {
          return Refuse("UnsupportedField",
                        "downwardAPI resourceFieldRef in volumes is not supported");
        }
        HS_RETURN_IF_ERROR(AddFile(files, StringValue(it, "path"), value, Mode(it, default_mode)));
      }
    }
    return OkStatus();
  }

  Status Volume(const json::object& v, v1::RunPodRequest& req) {
    std::string name = StringValue(v, "name");
    v1::Volume* out = req.add_volumes();
    out->set_name(name);
    auto default_mode = [](const json::object& src) {
      auto m = IntField(src, "defaultMode");
      return m ? static_cast<uint32_t>(*m) : 0644U;
    };
    if (ObjectField(v, "emptyDir") != nullptr) {
      out->mutable_empty_dir();
      return OkStatus();
    }
    if (const json::object* s = ObjectField(v, "secret")) {
      return KeyFiles(true, *s, default_mode(*s), *out->mutable_files());
    }
    if (const json::object* c = ObjectField(v, "configMap")) {
      return KeyFiles(false, *c, default_mode(*c), *out->mutable_files());
    }
    if (const json::object* d = ObjectField(v, "downwardAPI")) {
      return DownwardFiles(*d, default_mode(*d), *out->mutable_files());
    }
    if (const json::object* p = ObjectField(v, "projected")) {
      uint32_t mode = default_mode(*p);
      v1::Volume::Files* files = out->mutable_files();
      if (const json::array* sources = ArrayField(*p, "sources")) {
        for (const auto& sv : *sources) {
          if (!sv.is_object()) continue;
          const json::object& s = sv.as_object();
          if (const json::object* sec = ObjectField(s, "secret")) {
            HS_RETURN_IF_ERROR(KeyFiles(true, *sec, mode, *files));
          } else if (const json::object* cm = ObjectField(s, "configMap")) {
            HS_RETURN_IF_ERROR(KeyFiles(false, *cm, mode, *files));
          } else if (const json::object* da = ObjectField(s, "downwardAPI")) {
            HS_RETURN_IF_ERROR(DownwardFiles(*da, mode, *files));
          } else if (const json::object* sat = ObjectField(s, "serviceAccountToken")) {
            const json::object& spec =
                ObjectField(pod_, "spec") ? *ObjectField(pod_, "spec") : Empty();
            std::string sa = StringValue(spec, "serviceAccountName");
            if (sa.empty()) sa = "default";
            HS_ASSIGN_OR_RETURN(
                std::string token,
                inputs_.ServiceAccountToken(ns_, sa, StringValue(*sat, "audience"),
                                            IntField(*sat, "expirationSeconds").value_or(3600),
                                            std::string(kube::MetaString(pod_, "name")),
                                            std::string(kube::MetaString(pod_, "uid"))));
            HS_RETURN_IF_ERROR(AddFile(*files, StringValue(*sat, "path"), token, mode));
          } else {
            return Refuse(
                "UnsupportedVolume",
                "volume " + name + ": a projected source the control node cannot resolve");
          }
        }
      }
      return OkStatus();
    }
    std::string kind = "unknown";
    for (const auto& [k, _] : v) {
      if (k != "name") kind = std::string(k);
    }
    return Refuse("UnsupportedVolume", "volume " + name + " of type " + kind +
                                           " cannot run on a linked runner (supported: emptyDir, "
                                           "secret, configMap, downwardAPI, projected)");
  }

  Status ContainerOf(const json::object& c, const std::set<std::string>& volumes,
                     v1::Container& out) {
    out.set_name(StringValue(c, "name"));
    out.set_image(StringValue(c, "image"));
    if (const json::array* a = ArrayField(c, "command")) {
      for (const auto& v : *a) {
        if (v.is_string()) out.add_command(std::string(v.as_string()));
      }
    }
    if (const json::array* a = ArrayField(c, "args")) {
      for (const auto& v : *a) {
        if (v.is_string()) out.add_args(std::string(v.as_string()));
      }
    }
    out.set_working_dir(StringValue(c, "workingDir"));
    out.set_tty(BoolField(c, "tty").value_or(false));
    out.set_stdin(BoolField(c, "stdin").value_or(false));
    HS_RETURN_IF_ERROR(Env(c, out));
    if (const json::array* mounts = ArrayField(c, "volumeMounts")) {
      for (const auto& mv : *mounts) {
        if (!mv.is_object()) continue;
        const json::object& m = mv.as_object();
        std::string vol = StringValue(m, "name");
        if (!volumes.count(vol)) {
          return Refuse("UnsupportedField",
                        "container " + out.name() + " mounts unknown volume " + vol);
        }
        if (!StringField(m, "subPathExpr").empty()) {
          return Refuse("UnsupportedField",
                        "container " + out.name() + ": subPathExpr is not supported");
        }
        v1::Mount* o = out.add_mounts();
        o->set_volume(vol);
        o->set_container_path(StringValue(m, "mountPath"));
        o->set_sub_path(StringValue(m, "subPath"));
        o->set_read_only(BoolField(m, "readOnly").value_or(false));
      }
    }
    if (ArrayField(c, "volumeDevices") != nullptr && !ArrayField(c, "volumeDevices")->empty()) {
      return Refuse("UnsupportedVolume",
                    "container " + out.name() + ": volumeDevices (block PVCs)");
    }
    if (const json::object* r = ObjectField(c, "resources")) {
      for (const char* which : {"limits", "requests"}) {
        if (const json::object* m = ObjectField(*r, which)) {
          for (const auto& [k, v] : *m) {
            std::string q = v.is_string()  ? std::string(v.as_string())
                            : v.is_int64() ? std::to_string(v.as_int64())
                                           : "";
            (std::string(which) == "limits" ? *out.mutable_limits()
                                            : *out.mutable_requests())[std::string(k)] = q;
          }
        }
      }
    }
    return OkStatus();
  }

 private:
  const kube::Object& pod_;
  PodInputs& inputs_;
  std::string node_, host_ip_, ns_;
  std::map<std::string, std::map<std::string, std::string>> cache_;
};

}  // namespace

Result<PodNeeds> NeedsOf(const kube::Object& pod) {
  PodNeeds n;
  auto placement = kube::PlacementOf(pod);
  if (!placement.ok()) return Refuse("UnsupportedField", placement.error().message);
  for (const auto& [k, q] : placement->requests) n.requests[k] = q.MilliValue();
  if (const json::object* meta = ObjectField(pod, "metadata")) {
    if (const json::object* ann = ObjectField(*meta, "annotations")) {
      std::string hosts = StringValue(*ann, kSliceHostsAnnotation);
      if (!hosts.empty()) {
        bool digits =
            std::all_of(hosts.begin(), hosts.end(), [](char c) { return c >= '0' && c <= '9'; });
        if (!digits || hosts.size() > 4 || std::stoi(hosts) < 1) {
          return Refuse("InvalidSliceHosts", std::string(kSliceHostsAnnotation) + ": \"" + hosts +
                                                 "\" is not a host count (an integer >= 1)");
        }
        n.hosts = std::stoi(hosts);
      }
    }
  }
  const json::object* spec = ObjectField(pod, "spec");
  if (spec != nullptr) {
    n.host_network = BoolField(*spec, "hostNetwork").value_or(false);
    for (const char* list : {"initContainers", "containers"}) {
      if (const json::array* cs = ArrayField(*spec, list)) {
        for (const auto& c : *cs) {
          if (c.is_object() && !IsDigestReference(StringValue(c.as_object(), "image"))) {
            n.images_by_digest = false;
          }
        }
      }
    }
  }
  return n;
}

Result<v1::RunPodRequest> BuildRunPod(const kube::Object& pod, PodInputs& inputs,
                                      const std::string& node_name, const std::string& host_ip) {
  v1::RunPodRequest req;
  req.mutable_pod()->set_namespace_(std::string(kube::MetaString(pod, "namespace")));
  req.mutable_pod()->set_name(std::string(kube::MetaString(pod, "name")));
  req.mutable_pod()->set_uid(std::string(kube::MetaString(pod, "uid")));
  const json::object* spec = ObjectField(pod, "spec");
  if (spec == nullptr) return Refuse("UnsupportedField", "pod has no spec");
  Resolver r(pod, inputs, node_name, host_ip);
  std::set<std::string> volumes;
  if (const json::array* vs = ArrayField(*spec, "volumes")) {
    for (const auto& v : *vs) {
      if (!v.is_object()) continue;
      volumes.insert(StringValue(v.as_object(), "name"));
      HS_RETURN_IF_ERROR(r.Volume(v.as_object(), req));
    }
  }
  if (const json::array* eph = ArrayField(*spec, "ephemeralContainers"); eph && !eph->empty()) {
    return Refuse("UnsupportedField", "ephemeral containers cannot run on a linked runner");
  }
  if (const json::array* cs = ArrayField(*spec, "initContainers")) {
    for (const auto& c : *cs) {
      if (c.is_object())
        HS_RETURN_IF_ERROR(r.ContainerOf(c.as_object(), volumes, *req.add_init_containers()));
    }
  }
  if (const json::array* cs = ArrayField(*spec, "containers")) {
    for (const auto& c : *cs) {
      if (c.is_object())
        HS_RETURN_IF_ERROR(r.ContainerOf(c.as_object(), volumes, *req.add_containers()));
    }
  }
  if (req.containers_size() == 0) return Refuse("UnsupportedField", "pod has no containers");
  std::string restart = StringValue(*spec, "restartPolicy");
  req.set_restart_policy(restart.empty() ? "Always" : restart);
  req.set_host_network(BoolField(*spec, "hostNetwork").value_or(false));
  req.set_termination_grace_seconds(IntField(*spec, "terminationGracePeriodSeconds").value_or(30));
  std::string hostname = StringValue(*spec, "hostname");
  req.set_hostname(hostname.empty() ? req.pod().name() : hostname);
  if (const json::object* meta = ObjectField(pod, "metadata")) {
    if (const json::object* ann = ObjectField(*meta, "annotations")) {
      for (const auto& [k, v] : *ann) {
        // Only the annotations a runner's policy may act on.
        if (v.is_string() && std::string(k).rfind("runners.hyperslice.dev/", 0) == 0) {
          (*req.mutable_annotations())[std::string(k)] = std::string(v.as_string());
        }
      }
    }
  }
  return req;
}

}  // namespace hyperslice::runners::controlnode
