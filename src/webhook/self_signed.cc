// Self-managed webhook certificates: the Secret's state machine (Decide), and the side effects that
// follow it on every replica (serving files, caBundles).
#include "src/webhook/self_signed.h"

#include <charconv>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include <boost/asio/ip/address.hpp>
#include <boost/json.hpp>

#include "src/base/base64.h"
#include "src/base/files.h"
#include "src/base/json.h"
#include "src/base/log.h"
#include "src/kube/client.h"
#include "src/net/pki.h"

namespace hyperslice::webhook {
namespace {

namespace json = boost::json;
using SysClock = std::chrono::system_clock;

// Secret data and caBundle are validated base64 by the apiserver; what does not decode is absent.
std::string Unbase64(std::string_view in) {
  auto decoded = Base64Decode(in);
  return decoded.ok() ? std::move(decoded).value() : std::string();
}

int64_t Unix(SysClock::time_point t) {
  return std::chrono::duration_cast<std::chrono::seconds>(t.time_since_epoch()).count();
}

// The Secret's content, decoded.
struct PkiState {
  std::string ca_crt, ca_key, previous_ca_crt, tls_crt, tls_key;
  int64_t ca_issued_at = 0;
  int64_t serving_issued_at = 0;
  int64_t bundle_generation = 0;

  // What the webhook configurations must trust.
  std::string Bundle() const {
    std::string b = ca_crt;
    if (!b.empty() && b.back() != '\n') b += '\n';
    return b + previous_ca_crt;
  }
};

int64_t IntAnnotation(const kube::Object& obj, const char* key) {
  std::string_view v =
      jsonfield::StringField(jsonfield::ObjectAt(obj, "metadata.annotations"), key);
  int64_t n = 0;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  return ec == std::errc() && end == v.data() + v.size() ? n : 0;
}

Result<PkiState> ParseSecret(const kube::Object& secret, const std::string& name) {
  PkiState s;
  const json::value* data = secret.if_contains("data");
  if (data != nullptr && data->is_object()) {
    const json::object& d = data->get_object();
    s.ca_crt = Unbase64(jsonfield::StringValue(d, "ca.crt"));
    s.ca_key = Unbase64(jsonfield::StringValue(d, "ca.key"));
    s.previous_ca_crt = Unbase64(jsonfield::StringValue(d, "ca-previous.crt"));
    s.tls_crt = Unbase64(jsonfield::StringValue(d, "tls.crt"));
    s.tls_key = Unbase64(jsonfield::StringValue(d, "tls.key"));
  }
  if (s.ca_crt.empty()) {
    return Error::Make(Error::Code::kInvalidArgument,
                       "Secret " + name + " has no ca.crt; delete it to mint a new CA");
  }
  if (Result<net::pki::CertInfo> ca = net::pki::Inspect(s.ca_crt); !ca.ok()) {
    return Error::Make(Error::Code::kInvalidArgument, "Secret " + name + ": ca.crt is not a PEM " +
                                                          "certificate; delete the Secret to " +
                                                          "mint a new CA");
  }
  if (!s.tls_crt.empty() && !net::pki::Inspect(s.tls_crt).ok()) {
    return Error::Make(
        Error::Code::kInvalidArgument,
        "Secret " + name +
            ": tls.crt is not a PEM certificate; delete the Secret to mint a new CA");
  }
  s.ca_issued_at = IntAnnotation(secret, kCaIssuedAtAnnotation);
  s.serving_issued_at = IntAnnotation(secret, kServingIssuedAtAnnotation);
  s.bundle_generation = IntAnnotation(secret, kBundleGenerationAnnotation);
  return s;
}

kube::Object SecretObject(const SelfSignedOptions& o, const PkiState& s) {
  json::object data{{"ca.crt", Base64Encode(s.ca_crt)},
                    {"ca.key", Base64Encode(s.ca_key)},
                    {"tls.crt", Base64Encode(s.tls_crt)},
                    {"tls.key", Base64Encode(s.tls_key)}};
  if (!s.previous_ca_crt.empty()) data["ca-previous.crt"] = Base64Encode(s.previous_ca_crt);
  return kube::Object{
      {"apiVersion", "v1"},
      {"kind", "Secret"},
      {"metadata",
       json::object{
           {"name", o.secret},
           {"namespace", o.namespace_},
           {"labels", json::object{{"app.kubernetes.io/name", "hyperslice"},
                                   {"app.kubernetes.io/component", "webhook"}}},
           {"annotations",
            json::object{{kCaIssuedAtAnnotation, std::to_string(s.ca_issued_at)},
                         {kServingIssuedAtAnnotation, std::to_string(s.serving_issued_at)},
                         {kBundleGenerationAnnotation, std::to_string(s.bundle_generation)}}}}},
      {"type", "kubernetes.io/tls"},
      {"data", std::move(data)}};
}

Status WriteFileAtomically(const std::string& path, const std::string& content) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << content;
    if (!out) return Error::Make(Error::Code::kInternal, "cannot write " + tmp);
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) return Error::Make(Error::Code::kInternal, "cannot rename " + tmp + ": " + ec.message());
  return OkStatus();
}

// Every PEM certificate in a bundle, as its base64 body without whitespace (comparable).
std::vector<std::string> CertBodies(const std::string& pem) {
  std::vector<std::string> out;
  static constexpr std::string_view kBegin = "-----BEGIN CERTIFICATE-----";
  static constexpr std::string_view kEnd = "-----END CERTIFICATE-----";
  size_t pos = 0;
  while ((pos = pem.find(kBegin, pos)) != std::string::npos) {
    size_t end = pem.find(kEnd, pos);
    if (end == std::string::npos) break;
    std::string body;
    for (size_t i = pos + kBegin.size(); i < end; ++i) {
      if (!std::isspace(static_cast<unsigned char>(pem[i]))) body += pem[i];
    }
    out.push_back(std::move(body));
    pos = end + kEnd.size();
  }
  return out;
}

class SelfSignedImpl : public SelfSignedCertificates {
 public:
  SelfSignedImpl(std::shared_ptr<kube::Client> client, SelfSignedOptions o)
      : client_(std::move(client)), o_(std::move(o)) {}
  ~SelfSignedImpl() override {
    {
      std::lock_guard l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  void RunInBackground() {
    thread_ = std::thread([this] {
      std::unique_lock l(mu_);
      while (!cv_.wait_for(l, o_.check_interval, [this] { return stop_; })) {
        l.unlock();
        if (Status s = Reconcile(); !s.ok()) {
          log::Error("self-signed certificates not renewed; retrying at the next check",
                     {{"name", SecretName()}, {"error", s.error().message}});
        }
        l.lock();
      }
    });
  }

  Status Reconcile() override {
    for (int attempt = 0; attempt < 8; ++attempt) {
      Result<kube::Object> got = client_->Get(kube::resources::Secrets(), o_.namespace_, o_.secret);
      if (!got.ok() && got.error().code != Error::Code::kNotFound) return got.error();
      if (!got.ok()) {
        PkiState fresh;
        HS_RETURN_IF_ERROR(MintCa(fresh));
        HS_RETURN_IF_ERROR(IssueServing(fresh));
        // Above any generation the configurations carry (a Secret deleted to start over must not
        // lose to the bundle of the CA it replaces).
        HS_ASSIGN_OR_RETURN(int64_t published, PublishedGeneration());
        fresh.bundle_generation = published + 1;
        Result<kube::Object> created =
            client_->Create(kube::resources::Secrets(), o_.namespace_, SecretObject(o_, fresh));
        if (!created.ok() && created.error().code == Error::Code::kAlreadyExists) continue;
        if (!created.ok()) return created.error();
        log::Info("webhook CA minted", {{"name", SecretName()}});
        return Apply(fresh);
      }
      HS_ASSIGN_OR_RETURN(PkiState current, ParseSecret(*got, SecretName()));
      PkiState next = current;
      HS_ASSIGN_OR_RETURN(bool changed, Decide(next));
      if (!changed) return Apply(current);
      kube::Object obj = SecretObject(o_, next);
      json::object& md = obj["metadata"].as_object();
      md["resourceVersion"] = got->at("metadata").at("resourceVersion");
      Result<kube::Object> updated =
          client_->Update(kube::resources::Secrets(), o_.namespace_, obj);
      if (!updated.ok() && updated.error().code == Error::Code::kConflict) {
        log::Info("webhook certificate Secret changed by another replica; re-reading",
                  {{"name", SecretName()}});
        continue;
      }
      if (!updated.ok()) return updated.error();
      return Apply(next);
    }
    return Error::Make(Error::Code::kConflict,
                       "Secret " + SecretName() + " kept changing under us; retrying later");
  }

 private:
  std::string SecretName() const { return o_.namespace_ + "/" + o_.secret; }

  Status MintCa(PkiState& s) {
    SysClock::time_point now = SysClock::now();
    HS_ASSIGN_OR_RETURN(
        net::pki::KeyPair ca,
        net::pki::MakeCa("hyperslice-webhook-ca@" + std::to_string(Unix(now)), o_.ca_lifetime));
    s.ca_crt = ca.cert_pem;
    s.ca_key = ca.key_pem;
    s.ca_issued_at = Unix(now);
    return OkStatus();
  }

  Status IssueServing(PkiState& s) {
    SysClock::time_point now = SysClock::now();
    HS_ASSIGN_OR_RETURN(net::pki::CertInfo ca, net::pki::Inspect(s.ca_crt));
    net::pki::CertRequest req;
    std::string svc = o_.service_name + "." + o_.namespace_ + ".svc";
    req.common_name = svc;
    req.dns_names = {o_.service_name, o_.service_name + "." + o_.namespace_, svc,
                     svc + "." + o_.cluster_domain};
    for (const std::string& san : o_.extra_sans) {
      boost::system::error_code ec;
      boost::asio::ip::make_address(san, ec);
      (ec ? req.dns_names : req.ip_addresses).push_back(san);
    }
    req.server = true;
    // Never beyond the CA: a chain with a longer-lived leaf does not verify.
    req.validity =
        std::max(std::chrono::seconds(1),
                 std::min(o_.serving_lifetime,
                          std::chrono::duration_cast<std::chrono::seconds>(ca.not_after - now)));
    HS_ASSIGN_OR_RETURN(net::pki::KeyPair serving,
                        net::pki::Issue(net::pki::KeyPair{s.ca_crt, s.ca_key}, req));
    s.tls_crt = serving.cert_pem;
    s.tls_key = serving.key_pem;
    s.serving_issued_at = Unix(now);
    return OkStatus();
  }

  // True when every configured webhook's caBundle holds `ca_pem`.
  Result<bool> ConfigsTrust(const std::string& ca_pem) {
    std::vector<std::string> want = CertBodies(ca_pem);
    if (want.empty()) return false;
    for (const auto& [res, name] : Configs()) {
      HS_ASSIGN_OR_RETURN(kube::Object cfg, GetConfig(*res, name));
      const json::value* hooks = cfg.if_contains("webhooks");
      if (hooks == nullptr || !hooks->is_array()) continue;
      for (const json::value& h : hooks->get_array()) {
        const json::value* cc =
            h.is_object() ? h.get_object().if_contains("clientConfig") : nullptr;
        std::string bundle = cc != nullptr && cc->is_object()
                                 ? Unbase64(jsonfield::StringValue(cc->get_object(), "caBundle"))
                                 : "";
        std::vector<std::string> have = CertBodies(bundle);
        if (std::find(have.begin(), have.end(), want[0]) == have.end()) return false;
      }
    }
    return true;
  }

  // The highest bundle generation recorded on the webhook configurations (0 when none).
  Result<int64_t> PublishedGeneration() {
    int64_t max = 0;
    for (const auto& [res, name] : Configs()) {
      HS_ASSIGN_OR_RETURN(kube::Object cfg, GetConfig(*res, name));
      max = std::max(max, IntAnnotation(cfg, kBundleGenerationAnnotation));
    }
    return max;
  }

  std::vector<std::pair<const kube::Resource*, std::string>> Configs() const {
    std::vector<std::pair<const kube::Resource*, std::string>> out;
    if (!o_.mutating_config.empty())
      out.emplace_back(&kube::resources::MutatingWebhookConfigurations(), o_.mutating_config);
    // validating_config may name several configurations, comma-separated (the TPUNodeGroup and
    // GPU validations, and the sealed-pods one that deploy/ keeps separate).
    std::string_view rest = o_.validating_config;
    while (!rest.empty()) {
      size_t comma = rest.find(',');
      std::string_view name = rest.substr(0, comma);
      rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
      if (!name.empty())
        out.emplace_back(&kube::resources::ValidatingWebhookConfigurations(), std::string(name));
    }
    return out;
  }

  // Moves `s` one step toward the desired state; true when it changed (the Secret must be written).
  Result<bool> Decide(PkiState& s) {
    SysClock::time_point now = SysClock::now();
    int64_t now_s = Unix(now);
    bool changed = false;
    HS_ASSIGN_OR_RETURN(net::pki::CertInfo ca, net::pki::Inspect(s.ca_crt));
    bool legacy = s.ca_key.empty();
    bool ca_ending = ca.not_after - now < o_.ca_lifetime / 3;
    // A CA whose overlap has not finished yet is not replaced again.
    if (legacy || (ca_ending && s.previous_ca_crt.empty())) {
      log::Info(legacy ? "webhook CA Secret has no ca.key (older version): minting a new CA, the "
                         "old one stays trusted until the serving certificate is re-issued"
                       : "webhook CA nearing expiry: minting its successor",
                {{"name", SecretName()}});
      s.previous_ca_crt = ca.not_after > now ? s.ca_crt : "";
      HS_RETURN_IF_ERROR(MintCa(s));
      s.bundle_generation++;
      changed = true;
    }
    bool signed_by_current = false;
    std::optional<net::pki::CertInfo> serving;
    if (!s.tls_crt.empty() && !s.tls_key.empty()) {
      HS_ASSIGN_OR_RETURN(serving, net::pki::Inspect(s.tls_crt));
      HS_ASSIGN_OR_RETURN(signed_by_current, net::pki::SignedBy(s.tls_crt, s.ca_crt));
    }
    bool serving_expired = !serving || serving->not_after <= now;
    if (serving_expired) {
      HS_RETURN_IF_ERROR(IssueServing(s));
      log::Info("webhook serving certificate issued (none valid)", {{"name", SecretName()}});
      return true;
    }
    if (!signed_by_current) {
      // Switch to the new CA once every caBundle trusts it and the apiserver had time to see it.
      if (now_s >= s.ca_issued_at + o_.propagation_delay.count() && !changed) {
        HS_ASSIGN_OR_RETURN(bool trusted, ConfigsTrust(s.ca_crt));
        if (trusted) {
          HS_RETURN_IF_ERROR(IssueServing(s));
          log::Info("webhook serving certificate re-issued by the new CA",
                    {{"name", SecretName()}});
          return true;
        }
      }
      return changed;
    }
    if (serving->not_after - now < o_.serving_lifetime / 3) {
      HS_RETURN_IF_ERROR(IssueServing(s));
      log::Info("webhook serving certificate renewed", {{"name", SecretName()}});
      changed = true;
    }
    if (!s.previous_ca_crt.empty()) {
      Result<net::pki::CertInfo> prev = net::pki::Inspect(s.previous_ca_crt);
      bool prev_gone = !prev.ok() || prev->not_after <= now;
      bool all_switched =
          now_s >= s.serving_issued_at + o_.check_interval.count() + o_.propagation_delay.count();
      if (prev_gone || all_switched) {
        log::Info("previous webhook CA removed from the caBundle", {{"name", SecretName()}});
        s.previous_ca_crt.clear();
        s.bundle_generation++;
        changed = true;
      }
    }
    return changed;
  }

  // What every replica does with the Secret's state: serve its pair, publish its bundle.
  Status Apply(const PkiState& s) {
    if (ReadFileOrEmpty(o_.key_file) != s.tls_key || ReadFileOrEmpty(o_.cert_file) != s.tls_crt) {
      // The server re-reads the pair when either file changes and keeps the previous one while
      // the two do not match, so the order of the two renames does not matter.
      HS_RETURN_IF_ERROR(WriteFileAtomically(o_.key_file, s.tls_key));
      HS_RETURN_IF_ERROR(WriteFileAtomically(o_.cert_file, s.tls_crt));
      log::Info("webhook serving pair written", {{"file", o_.cert_file}});
    }
    for (const auto& [res, name] : Configs()) HS_RETURN_IF_ERROR(PatchBundle(*res, name, s));
    return OkStatus();
  }

  // Sets clientConfig.caBundle of every webhook in the configuration, unless it already carries
  // this bundle or a newer generation (written by a replica that read the Secret after us).
  Status PatchBundle(const kube::Resource& r, const std::string& name, const PkiState& s) {
    std::string bundle = Base64Encode(s.Bundle());
    for (int attempt = 0; attempt < 5; ++attempt) {
      HS_ASSIGN_OR_RETURN(kube::Object cfg, GetConfig(r, name));
      int64_t generation = IntAnnotation(cfg, kBundleGenerationAnnotation);
      if (generation > s.bundle_generation) return OkStatus();
      const json::value* hooks = cfg.if_contains("webhooks");
      size_t n = hooks != nullptr && hooks->is_array() ? hooks->get_array().size() : 0;
      bool current = generation == s.bundle_generation;
      for (size_t i = 0; i < n && current; ++i) {
        const json::value* cc = hooks->get_array()[i].as_object().if_contains("clientConfig");
        current = cc != nullptr && cc->is_object() &&
                  jsonfield::StringValue(cc->get_object(), "caBundle") == bundle;
      }
      if (current) return OkStatus();
      json::object& md = cfg["metadata"].as_object();
      json::array patch;
      patch.push_back(json::object{
          {"op", "test"}, {"path", "/metadata/resourceVersion"}, {"value", md["resourceVersion"]}});
      if (md.contains("annotations")) {
        patch.push_back(json::object{{"op", "add"},
                                     {"path",
                                      "/metadata/annotations/webhook.hyperslice.dev~1"
                                      "ca-bundle-generation"},
                                     {"value", std::to_string(s.bundle_generation)}});
      } else {
        patch.push_back(json::object{
            {"op", "add"},
            {"path", "/metadata/annotations"},
            {"value",
             json::object{{kBundleGenerationAnnotation, std::to_string(s.bundle_generation)}}}});
      }
      for (size_t i = 0; i < n; ++i) {
        patch.push_back(
            json::object{{"op", "add"},
                         {"path", "/webhooks/" + std::to_string(i) + "/clientConfig/caBundle"},
                         {"value", bundle}});
      }
      Result<kube::Object> res =
          client_->Patch(r, "", name, kube::PatchType::kJson, json::serialize(patch));
      if (res.ok()) {
        log::Info("caBundle set",
                  {{"configuration", name},
                   {"certificates", static_cast<int64_t>(CertBodies(s.Bundle()).size())}});
        return OkStatus();
      }
      // A failed "test" (someone changed the configuration meanwhile) is 422 or 409: re-read.
      if (res.error().code != Error::Code::kConflict &&
          res.error().code != Error::Code::kInvalidArgument) {
        return Named(r, name, "cannot set the caBundle of", res.error());
      }
    }
    return Error::Make(Error::Code::kConflict,
                       "caBundle of " + r.kind + " \"" + name + "\" kept changing under us");
  }

  // A webhook configuration, with an error that says which one was looked up and through which
  // flag (the apiserver's own text may be as bare as "the server could not find the requested
  // resource").
  Result<kube::Object> GetConfig(const kube::Resource& r, const std::string& name) {
    Result<kube::Object> got = client_->Get(r, "", name);
    if (!got.ok()) return Named(r, name, "cannot read", got.error());
    return got;
  }
  static Error Named(const kube::Resource& r, const std::string& name, const std::string& what,
                     Error e) {
    bool mutating = r.kind == "MutatingWebhookConfiguration";
    e.message = what + " " + r.kind + " \"" + name + "\" (--" +
                (mutating ? "mutating" : "validating") +
                "-webhook-configuration; empty for none): " + e.message;
    return e;
  }

  std::shared_ptr<kube::Client> client_;
  SelfSignedOptions o_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace

Result<std::unique_ptr<SelfSignedCertificates>> SelfSignedCertificates::Start(
    std::shared_ptr<kube::Client> client, SelfSignedOptions options) {
  if (options.serving_lifetime.count() <= 0 || options.ca_lifetime.count() <= 0 ||
      options.check_interval.count() <= 0) {
    return Error::Make(Error::Code::kInvalidArgument,
                       "certificate lifetimes and the check interval must be positive");
  }
  if (options.serving_lifetime > options.ca_lifetime / 3) {
    return Error::Make(Error::Code::kInvalidArgument,
                       "the serving certificate lifetime must be at most 1/3 of the CA lifetime "
                       "(the CA is replaced when 1/3 of its lifetime remains)");
  }
  auto impl = std::make_unique<SelfSignedImpl>(std::move(client), std::move(options));
  HS_RETURN_IF_ERROR(impl->Reconcile());
  impl->RunInBackground();
  return std::unique_ptr<SelfSignedCertificates>(std::move(impl));
}

}  // namespace hyperslice::webhook
