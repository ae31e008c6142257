#include "src/gpu/boot_payload.h"

#include <algorithm>
#include <cctype>
#include <utility>

#include <zlib.h>
#include <boost/json.hpp>

#include "src/base/base64.h"
#include "src/base/json.h"
#include "src/gpu/api.h"
#include "src/gpu/bootstrap_token.h"
#include "src/gpu/credentials.h"
#include "src/gpu/internal/claim.h"
#include "src/gpu/planner.h"
#include "src/gpu/talos.h"
#include "src/kube/client.h"
#include "src/kube/config.h"
#include "src/kube/store.h"

namespace hyperslice::gpu {

namespace bj = boost::json;
using jsonfield::ArrayField;
using jsonfield::ObjectAt;
using jsonfield::ObjectField;
using jsonfield::StringField;

const char* JoinMethodName(JoinMethod method) {
  switch (method) {
    case JoinMethod::kCloudInit:
      return "CloudInit";
    case JoinMethod::kStartupScript:
      return "StartupScript";
    case JoinMethod::kTalos:
      return "Talos";
    case JoinMethod::kLinkedRunner:
      return "LinkedRunner";
  }
  return "CloudInit";
}

JoinMethod JoinMethodFor(const Offer& offer, const std::set<std::string>& talos_providers) {
  switch (offer.boot) {
    case BootKind::kContainer:
      return JoinMethod::kLinkedRunner;
    case BootKind::kStartupScript:
      return JoinMethod::kStartupScript;
    case BootKind::kUserData:
      break;
  }
  return talos_providers.count(offer.provider) > 0 ? JoinMethod::kTalos : JoinMethod::kCloudInit;
}

size_t MaxPayloadBytes(const std::string& provider, JoinMethod method) {
  if (method == JoinMethod::kLinkedRunner) return 0;
  if (provider == kPaperspace) return size_t{64} * 1024;
  if (provider == kVast) return 4048;
  if (provider == kLambda) return 1000000;
  return size_t{16} * 1024;  // an unknown provider: EC2's limit, the smallest common one
}

bool DeliversScriptStub(const std::string& provider) { return provider == kVast; }

namespace {

// gzip (RFC 1952) of `in` with zlib: a gzip header (no name, mtime 0) and deflate at level 9.
Result<std::string> Gzip(std::string_view in) {
  z_stream z{};
  // windowBits 15 + 16: a gzip wrapper instead of zlib's; memLevel 9: the best ratio.
  if (deflateInit2(&z, Z_BEST_COMPRESSION, Z_DEFLATED, 15 + 16, 9, Z_DEFAULT_STRATEGY) != Z_OK) {
    return Error::Make(Error::Code::kInternal, "zlib: deflateInit2 failed");
  }
  std::string out(deflateBound(&z, static_cast<uLong>(in.size())) + 32, '\0');
  // zlib's API takes non-const pointers; it does not write through next_in.
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));  // NOLINT
  z.avail_in = static_cast<uInt>(in.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());  // NOLINT
  z.avail_out = static_cast<uInt>(out.size());
  int rc = deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  if (rc != Z_STREAM_END) return Error::Make(Error::Code::kInternal, "zlib: deflate failed");
  return out;
}

}  // namespace

Result<std::string> RenderScriptStub(std::string_view script) {
  HS_ASSIGN_OR_RETURN(std::string gz, Gzip(script));
  // One base64 line (line breaks would cost onstart characters); `base64 -d` reads it from a
  // quoted heredoc, so the shell expands nothing in it. The decoded script lands in a mktemp
  // file (mode 0600, umask) that is removed when the stub exits.
  std::string s;
  s += "#!/bin/sh\n";
  s += kScriptStubMarker;
  s += "\n";
  s += "set -eu\n";
  s += "umask 077\n";
  s += "script=\"$(mktemp)\"\n";
  s += "trap 'rm -f \"$script\"' EXIT\n";
  s += "base64 -d <<'HS_EOF' | gunzip >\"$script\"\n";
  s += Base64Encode(gz);
  s += "\nHS_EOF\n";
  s += "bash \"$script\"\n";
  return s;
}

namespace {

Error Invalid(std::string message) {
  return Error::Make(Error::Code::kInvalidArgument, std::move(message), "InvalidBootPayload");
}

bool AllOf(std::string_view s, std::string_view extra) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [&](char c) {
    auto u = static_cast<unsigned char>(c);
    return std::isalnum(u) != 0 || extra.find(c) != std::string_view::npos;
  });
}

// Label keys and values, taint parts and names are restricted to the characters Kubernetes
// allows there; that also keeps them inert in a shell heredoc and a systemd EnvironmentFile.
bool LabelKey(std::string_view k) { return AllOf(k, "./-_") && k.size() <= 316; }
bool LabelValue(std::string_view v) { return v.empty() || (AllOf(v, ".-_") && v.size() <= 63); }
// A URL with nothing a shell, YAML or systemd would read specially.
bool PlainUrl(std::string_view u) {
  return (u.rfind("https://", 0) == 0 || u.rfind("http://", 0) == 0) && AllOf(u, ":/.-_[]%");
}

// NodeRestriction lets a kubelet set only these labels under kubernetes.io / k8s.io; the claim
// controller writes the others with its own credentials once the Node registered.
bool KubeletMaySet(std::string_view key) {
  auto slash = key.find('/');
  if (slash == std::string_view::npos) return true;
  std::string_view ns = key.substr(0, slash);
  auto ends = [&](std::string_view suffix) {
    return ns == suffix.substr(1) ||
           (ns.size() > suffix.size() && ns.substr(ns.size() - suffix.size()) == suffix);
  };
  if (!ends(".kubernetes.io") && !ends(".k8s.io")) return true;
  if (ns == "kubelet.kubernetes.io" || ns == "node.kubernetes.io") return true;
  static const std::set<std::string_view> kAllowed = {"kubernetes.io/hostname",
                                                      "kubernetes.io/arch",
                                                      "kubernetes.io/os",
                                                      "beta.kubernetes.io/instance-type",
                                                      "topology.kubernetes.io/region",
                                                      "topology.kubernetes.io/zone"};
  return kAllowed.count(key) > 0;
}

}  // namespace

Result<std::string> RenderJoinScript(const JoinScriptValues& v) {
  if (!PlainUrl(v.server)) return Invalid("the control plane endpoint must be a plain URL");
  if (v.cluster_ca_pem.find("-----BEGIN CERTIFICATE-----") == std::string::npos) {
    return Invalid("the cluster CA is not a PEM certificate");
  }
  if (!IsBootstrapToken(v.bootstrap_token)) {
    return Invalid("the bootstrap token is not in the format [a-z0-9]{6}.[a-z0-9]{16}");
  }
  if (!AllOf(v.node_name, ".-") || v.node_name.size() > 253) {
    return Invalid("node name '" + v.node_name + "' is not a DNS subdomain");
  }
  if (!AllOf(v.provider, "-_")) return Invalid("provider name '" + v.provider + "' is not plain");
  std::string labels;
  for (const auto& [k, val] : v.labels) {
    if (!LabelKey(k) || !LabelValue(val)) return Invalid("label " + k + " is invalid");
    if (!KubeletMaySet(k)) continue;
    if (!labels.empty()) labels += ',';
    labels += k;
    labels += '=';
    labels += val;
  }
  std::vector<NodeTaint> taints = v.taints;
  if (std::none_of(taints.begin(), taints.end(),
                   [](const NodeTaint& t) { return t.key == kTaintUnregistered; })) {
    taints.push_back({kTaintUnregistered, "true", "NoExecute"});
  }
  std::string taint_flag;
  for (const auto& t : taints) {
    if (!LabelKey(t.key) || !LabelValue(t.value) ||
        (t.effect != "NoSchedule" && t.effect != "PreferNoSchedule" && t.effect != "NoExecute")) {
      return Invalid("taint " + t.key + "=" + t.value + ":" + t.effect + " is invalid");
    }
    if (!taint_flag.empty()) taint_flag += ',';
    taint_flag += t.key;
    taint_flag += '=';
    taint_flag += t.value;
    taint_flag += ':';
    taint_flag += t.effect;
  }
  bool tailnet = !v.tailscale_auth_key.empty();
  if (tailnet && !AllOf(v.tailscale_auth_key, "-_")) {
    return Invalid("the tailnet auth key has characters an auth key does not");  // not echoed
  }
  if (!v.tailscale_login_server.empty() && !PlainUrl(v.tailscale_login_server)) {
    return Invalid("the tailnet login server must be a plain URL");
  }

  // Quoted heredoc delimiters: nothing inside is expanded by the shell. The kubeconfig and the
  // environment file are the two documents sim/gpumachine reads back.
  std::string s;
  s += "#!/bin/bash\n";
  s += "# hyperslice: joins this rented machine to its Kubernetes cluster as Node " + v.node_name +
       ".\n";
  s += "# Rendered for this machine alone; it carries a short-lived bootstrap token.\n";
  s += "set -euo pipefail\n";
  s += "umask 077\n";
  s += "mkdir -p /etc/kubernetes /etc/hyperslice /var/lib/kubelet/pki\n";
  s += "cat > /etc/kubernetes/bootstrap-kubelet.conf <<'HS_EOF'\n";
  s += "apiVersion: v1\n";
  s += "kind: Config\n";
  s += "clusters:\n";
  s += "- name: cluster\n";
  s += "  cluster:\n";
  s += "    server: " + v.server + "\n";
  s += "    certificate-authority-data: " + Base64Encode(v.cluster_ca_pem) + "\n";
  s += "contexts:\n";
  s += "- name: tls-bootstrap\n";
  s += "  context:\n";
  s += "    cluster: cluster\n";
  s += "    user: kubelet-bootstrap\n";
  s += "current-context: tls-bootstrap\n";
  s += "users:\n";
  s += "- name: kubelet-bootstrap\n";
  s += "  user:\n";
  s += "    token: " + v.bootstrap_token + "\n";
  s += "HS_EOF\n";
  s += "cat > /etc/hyperslice/kubelet.env <<'HS_EOF'\n";
  s += "NODE_NAME=" + v.node_name + "\n";
  s += "PROVIDER_ID_PREFIX=" + v.provider + "://\n";
  s += "NODE_LABELS=" + labels + "\n";
  s += "REGISTER_WITH_TAINTS=" + taint_flag + "\n";
  s += "HS_EOF\n";
  s += "# The provider assigns the instance id at create; cloud-init knows it on the machine.\n";
  s += "INSTANCE_ID=\"$(cloud-init query v1.instance_id)\"\n";
  s += "echo \"INSTANCE_ID=${INSTANCE_ID}\" >> /etc/hyperslice/kubelet.env\n";
  if (tailnet) {
    s += "cat > /etc/hyperslice/tailscale-authkey <<'HS_EOF'\n";
    s += v.tailscale_auth_key + "\n";
    s += "HS_EOF\n";
  }
  s += "# Install only what the image lacks, from its own apt sources.\n";
  s += "missing=()\n";
  s += "command -v kubelet >/dev/null 2>&1 || missing+=(kubelet)\n";
  s += "command -v containerd >/dev/null 2>&1 || missing+=(containerd)\n";
  if (tailnet) s += "command -v tailscale >/dev/null 2>&1 || missing+=(tailscale)\n";
  s += "if [ \"${#missing[@]}\" -gt 0 ]; then\n";
  s += "  export DEBIAN_FRONTEND=noninteractive\n";
  s += "  apt-get update -q\n";
  s += "  apt-get install -y -q --no-install-recommends \"${missing[@]}\"\n";
  s += "fi\n";
  s += "systemctl enable --now containerd\n";
  if (tailnet) {
    s += "systemctl enable --now tailscaled\n";
    s += "tailscale up --auth-key=file:/etc/hyperslice/tailscale-authkey --hostname=" + v.node_name;
    if (!v.tailscale_login_server.empty()) s += " --login-server=" + v.tailscale_login_server;
    s += "\n";
    s += "rm -f /etc/hyperslice/tailscale-authkey\n";
    s += "# The Node's address is its tailnet address.\n";
    s += "NODE_IP=\"$(tailscale ip -4 | head -n 1)\"\n";
    s += "echo \"NODE_IP=${NODE_IP}\" >> /etc/hyperslice/kubelet.env\n";
  }
  s += "KUBELET_BIN=\"$(command -v kubelet)\"\n";
  // Unquoted delimiter: only KUBELET_BIN is expanded now; systemd expands the escaped variables
  // from the EnvironmentFile when it starts the kubelet.
  s += "cat > /etc/systemd/system/hyperslice-kubelet.service <<HS_EOF\n";
  s += "[Unit]\n";
  s += "Description=kubelet (hyperslice rented GPU machine)\n";
  s += "Wants=network-online.target containerd.service\n";
  s += "After=network-online.target containerd.service\n";
  s += "[Service]\n";
  s += "EnvironmentFile=/etc/hyperslice/kubelet.env\n";
  s += "ExecStart=${KUBELET_BIN} --bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf "
       "--kubeconfig=/etc/kubernetes/kubelet.conf --cert-dir=/var/lib/kubelet/pki "
       "--rotate-certificates "
       "--container-runtime-endpoint=unix:///run/containerd/containerd.sock "
       "--hostname-override=\\${NODE_NAME} "
       "--provider-id=\\${PROVIDER_ID_PREFIX}\\${INSTANCE_ID} --node-labels=\\${NODE_LABELS} "
       "--register-with-taints=\\${REGISTER_WITH_TAINTS}";
  if (tailnet) s += " --node-ip=\\${NODE_IP}";
  s += "\n";
  s += "Restart=always\n";
  s += "RestartSec=5\n";
  s += "[Install]\n";
  s += "WantedBy=multi-user.target\n";
  s += "HS_EOF\n";
  s += "systemctl daemon-reload\n";
  s += "systemctl enable --now hyperslice-kubelet.service\n";
  return s;
}

namespace {

// The entry of spec.providers naming `provider`, or nullptr.
const bj::object* ProviderEntry(const kube::Object& cls, const std::string& provider) {
  const bj::object* spec = ObjectField(cls, "spec");
  const bj::array* providers = spec ? ArrayField(*spec, "providers") : nullptr;
  if (providers == nullptr) return nullptr;
  for (const bj::value& v : *providers) {
    if (v.is_object() && StringField(v.as_object(), "name") == provider) return &v.as_object();
  }
  return nullptr;
}

std::vector<NodeTaint> Taints(const bj::object* spec, std::string_view field) {
  std::vector<NodeTaint> out;
  const bj::array* a = spec ? ArrayField(*spec, field) : nullptr;
  for (const bj::value& t : a ? *a : bj::array{}) {
    if (!t.is_object()) continue;
    const bj::object& o = t.as_object();
    out.push_back({std::string(StringField(o, "key")), std::string(StringField(o, "value")),
                   std::string(StringField(o, "effect"))});
  }
  return out;
}

class Builder {
 public:
  explicit Builder(PayloadBuilderOptions o) : o_(std::move(o)) {}

  Result<BootPayload> Build(const BootContext& ctx) {
    if (ctx.claim == nullptr || ctx.node_class == nullptr || ctx.offer == nullptr) {
      return Invalid("no claim, class or offer to build a boot payload for");
    }
    const Offer& offer = *ctx.offer;
    JoinMethod method = JoinMethodFor(offer, o_.talos_providers);
    BootPayload p;
    p.join_method = JoinMethodName(method);
    if (const bj::object* entry = ProviderEntry(*ctx.node_class, offer.provider)) {
      if (const bj::array* keys = ArrayField(*entry, "sshKeyNames")) {
        for (const bj::value& k : *keys) {
          if (k.is_string()) p.ssh_key_names.emplace_back(k.get_string());
        }
      }
    }
    // The class names none: the operator's key for that provider account, if it has one (Lambda
    // refuses a launch without exactly one).
    if (p.ssh_key_names.empty()) {
      if (auto d = o_.default_ssh_key_names.find(offer.provider);
          d != o_.default_ssh_key_names.end())
        p.ssh_key_names = d->second;
    }
    if (method == JoinMethod::kLinkedRunner) {
      return Error::Make(Error::Code::kInvalidArgument,
                         offer.provider + " offer " + offer.id +
                             " runs containers only: such a machine joins as a linked runner, "
                             "which is not built yet",
                         kReasonLinkedRunnerRequired);
    }
    if (o_.control_plane_endpoint.empty()) {
      return Error::Make(Error::Code::kInvalidArgument,
                         "no control plane endpoint for machines to join "
                         "(--gpu-control-plane-endpoint)",
                         "NoControlPlaneEndpoint");
    }
    std::string ca = o_.cluster_ca_pem.empty() ? o_.client->config().tls.ca_pem : o_.cluster_ca_pem;
    if (ca.empty()) return Invalid("no cluster CA to give the machine (--gpu-cluster-ca-file)");
    const kube::Object& claim = *ctx.claim;
    std::string claim_name(kube::MetaString(claim, "name"));
    std::string claim_uid(kube::MetaString(claim, "uid"));
    TailnetJoin tailnet;
    if (o_.tailnet) {
      HS_ASSIGN_OR_RETURN(tailnet, o_.tailnet(ctx));
    } else {
      // The key the claim controller minted for this launch (ClaimControllerOptions::tailnet).
      tailnet = TailnetJoin{ctx.tailnet_auth_key, ctx.tailnet_login_server};
    }
    // A retried launch reuses the live token; one about to expire is not handed out again.
    HS_ASSIGN_OR_RETURN(
        BootstrapToken token,
        EnsureBootstrapToken(*o_.client, claim_name, claim_uid, o_.token_ttl, o_.token_ttl / 2));
    std::string pool = internal::Label(claim, kLabelNodePool);
    std::string pool_ns = internal::Label(claim, kLabelPoolNamespace);

    std::string payload;
    if (method == JoinMethod::kTalos) {
      HS_ASSIGN_OR_RETURN(payload, RenderTalos(ctx, token, ca, tailnet, claim_name, pool));
      p.user_data = payload;
    } else {
      JoinScriptValues v;
      v.server = o_.control_plane_endpoint;
      v.cluster_ca_pem = ca;
      v.bootstrap_token = token.token;
      v.node_name = claim_name;
      v.provider = offer.provider;
      v.labels = {{kLabelNodePool, pool}, {"tgp.io/provisioned", "true"}};
      v.tailscale_auth_key = tailnet.auth_key;
      v.tailscale_login_server = tailnet.login_server;
      if (!pool.empty()) {
        auto got = o_.client->Get(GPUNodePools(), pool_ns.empty() ? "default" : pool_ns, pool);
        if (got.ok()) {
          const bj::object* tspec = ObjectAt(*got, "spec.template.spec");
          const bj::object* tmeta = ObjectAt(*got, "spec.template.metadata");
          for (auto& t : Taints(tspec, "taints")) v.taints.push_back(std::move(t));
          for (auto& t : Taints(tspec, "startupTaints")) v.taints.push_back(std::move(t));
          if (const bj::object* l = tmeta ? ObjectField(*tmeta, "labels") : nullptr) {
            for (const auto& [k, val] : *l) {
              if (val.is_string()) v.labels.emplace(std::string(k), std::string(val.as_string()));
            }
          }
        } else if (got.error().code != Error::Code::kNotFound) {
          return got.error();
        }
      }
      HS_ASSIGN_OR_RETURN(payload, RenderJoinScript(v));
      if (DeliversScriptStub(offer.provider)) {
        HS_ASSIGN_OR_RETURN(payload, RenderScriptStub(payload));
      }
      (method == JoinMethod::kStartupScript ? p.startup_script : p.user_data) = payload;
    }
    size_t limit = MaxPayloadBytes(offer.provider, method);
    if (payload.size() > limit) {
      return Invalid(std::string(p.join_method) + " payload is " + std::to_string(payload.size()) +
                     " bytes; " + offer.provider + " takes at most " + std::to_string(limit));
    }
    return p;
  }

 private:
  // The class's template (the provider entry's talosConfig over spec.talosConfig; inline, from a
  // Secret, else the default worker template), filled with real values and checked.
  Result<std::string> RenderTalos(const BootContext& ctx, const BootstrapToken& token,
                                  const std::string& ca, const TailnetJoin& tailnet,
                                  const std::string& claim_name, const std::string& pool) {
    const bj::object* talos = ObjectAt(*ctx.node_class, "spec.talosConfig");
    if (const bj::object* entry = ProviderEntry(*ctx.node_class, ctx.offer->provider)) {
      if (const bj::object* own = ObjectField(*entry, "talosConfig")) talos = own;
    }
    std::string tmpl(talos ? StringField(*talos, "machineConfigTemplate") : "");
    if (const bj::object* ref = talos ? ObjectField(*talos, "machineConfigSecretRef") : nullptr) {
      HS_ASSIGN_OR_RETURN(tmpl, SecretKey(*ref, std::string(StringField(*ref, "key"))));
    }
    if (tmpl.empty()) tmpl = std::string(DefaultTalosTemplate());
    TemplateValues values{{"KubernetesBootstrapToken", token.token},
                          {"KubernetesCA", Base64Encode(ca)},
                          {"ControlPlaneEndpoint", o_.control_plane_endpoint},
                          {"ClusterName", o_.cluster_name},
                          {"TailscaleAuthKey", tailnet.auth_key},
                          {"NodeName", claim_name},
                          {"NodePool", pool},
                          {"NodeIndex", "0"}};
    // Talos's cluster secrets, when the class names their Secret; a template that uses one
    // without it fails to render, naming the variable.
    if (const bj::object* ref = talos ? ObjectField(*talos, "clusterSecretsRef") : nullptr) {
      for (const char* key : {"MachineToken", "ClusterCA", "ClusterID", "ClusterSecret"}) {
        auto v = SecretKey(*ref, key);
        if (v.ok()) values[key] = *v;
        if (!v.ok() && v.error().code != Error::Code::kNotFound) return v.error();
      }
    }
    auto rendered = RenderTalosTemplate(tmpl, values);
    if (!rendered.ok()) return Invalid("Talos template: " + rendered.error().message);
    auto refusals = CheckTalosConfig(*rendered);
    if (!refusals.empty()) {
      std::string why = "Talos would refuse the rendered machine config:";
      for (const auto& r : refusals) why += " " + r + ";";
      return Invalid(why);
    }
    return *rendered;
  }

  Result<std::string> SecretKey(const bj::object& ref, const std::string& key) {
    std::string ns(StringField(ref, "namespace"));
    if (ns.empty()) ns = kDefaultCredentialsNamespace;
    auto s = o_.client->Get(kube::resources::Secrets(), ns, std::string(StringField(ref, "name")));
    if (!s.ok()) return s.error();
    const bj::object* data = ObjectField(*s, "data");
    const bj::value* v = data ? data->if_contains(key) : nullptr;
    if (v == nullptr || !v->is_string()) {
      return Error::Make(
          Error::Code::kNotFound,
          "Secret " + ns + "/" + std::string(StringField(ref, "name")) + " has no key " + key);
    }
    return Base64Decode(std::string_view(v->as_string()), "secret " + key);
  }

  PayloadBuilderOptions o_;
};

}  // namespace

PayloadBuilder NewPayloadBuilder(PayloadBuilderOptions options) {
  auto b = std::make_shared<Builder>(std::move(options));
  return [b](const BootContext& ctx) { return b->Build(ctx); };
}

}  // namespace hyperslice::gpu
