#include "src/gpu/tailnet_credentials.h"

#include <algorithm>
#include <utility>

#include <boost/json.hpp>

#include "src/base/json.h"
#include "src/base/log.h"
#include "src/gpu/provider.h"
#include "src/kube/object_helpers.h"

namespace hyperslice::gpu {
namespace {

namespace bj = boost::json;
using jsonfield::ArrayField;
using jsonfield::ObjectAt;
using jsonfield::ObjectField;
using jsonfield::StringField;

const bj::object* TailscaleConfigOf(const kube::Object& node_class) {
  return ObjectAt(node_class, "spec.tailscaleConfig");
}

std::vector<std::string> TagsOf(const bj::object& ts) {
  std::vector<std::string> tags;
  if (const bj::array* a = ArrayField(ts, "tags")) {
    for (const bj::value& v : *a) {
      if (v.is_string()) tags.emplace_back(v.get_string());
    }
  }
  return tags;
}

std::string Or(std::string_view v, const char* fallback) {
  return v.empty() ? std::string(fallback) : std::string(v);
}

// The Secret named by the class's first provider's credentialsRef: where the CRD says an OAuth
// client is found when oauthCredentialsSecretRef is absent.
std::pair<std::string, std::string> FirstProviderSecret(const kube::Object& node_class) {
  if (const bj::array* ps = ObjectAt(node_class, "spec") != nullptr
                                ? ArrayField(*ObjectAt(node_class, "spec"), "providers")
                                : nullptr) {
    for (const bj::value& v : *ps) {
      const bj::object* ref =
          v.is_object() ? ObjectField(v.get_object(), "credentialsRef") : nullptr;
      if (ref != nullptr) {
        return {std::string(StringField(*ref, "namespace")),
                std::string(StringField(*ref, "name"))};
      }
    }
  }
  return {};
}

Error Invalid(std::string message) {
  return Error::Make(Error::Code::kInvalidArgument, std::move(message), "TailnetConfigInvalid");
}

constexpr char kSuffixAlphabet[] = "bcdfghjklmnpqrstvwxz2456789";  // provisioner.cc's RandomSuffix

}  // namespace

bool LooksLikeClaimName(const std::string& hostname, const std::set<std::string>& pools) {
  constexpr size_t kSuffix = 5;
  if (hostname.size() < kSuffix + 2 || hostname[hostname.size() - kSuffix - 1] != '-') return false;
  std::string suffix = hostname.substr(hostname.size() - kSuffix);
  if (suffix.find_first_not_of(kSuffixAlphabet) != std::string::npos) return false;
  return pools.count(hostname.substr(0, hostname.size() - kSuffix - 1)) != 0;
}

std::string TailnetIPv4(const Device& device) {
  for (const std::string& a : device.addresses) {
    if (a.find(':') == std::string::npos) return a;
  }
  return {};
}

Result<std::unique_ptr<TailnetAdmin>> DefaultTailnetAdmin(const TailnetCredentialsOptions& options,
                                                          const kube::Object& node_class) {
  const bj::object* ts = TailscaleConfigOf(node_class);
  if (ts == nullptr) return Invalid("the class has no tailscaleConfig");
  std::string login_server(StringField(*ts, "loginServer"));
  const bj::object* oauth = ObjectField(*ts, "oauthCredentialsSecretRef");
  SecretRef client_id, client_secret;
  if (oauth != nullptr) {
    client_id = {std::string(StringField(*oauth, "namespace")),
                 std::string(StringField(*oauth, "name")),
                 Or(StringField(*oauth, "clientIdKey"), "client-id")};
    client_secret = {client_id.ns, client_id.name,
                     Or(StringField(*oauth, "clientSecretKey"), "client-secret")};
  } else {
    auto [ns, name] = FirstProviderSecret(node_class);
    client_id = {ns, name, "client-id"};
    client_secret = {ns, name, "client-secret"};
  }
  if (!login_server.empty()) {
    HeadscaleConfig hc;
    hc.login_server = login_server;
    SecretRef api_key = client_secret;
    if (const bj::object* ref = ObjectField(*ts, "apiKeySecretRef")) {
      api_key = {std::string(StringField(*ref, "namespace")),
                 std::string(StringField(*ref, "name")), Or(StringField(*ref, "key"), "api-key")};
    }
    if (api_key.name.empty()) {
      return Invalid("tailscaleConfig.loginServer needs tailscaleConfig.apiKeySecretRef");
    }
    hc.api_key = SecretCredential(options.client, api_key, options.credentials_namespace);
    return NewHeadscaleAdmin(hc);
  }
  if (client_id.name.empty()) {
    return Invalid(
        "tailscaleConfig needs oauthCredentialsSecretRef (or a provider credentialsRef)");
  }
  TailscaleConfig tc;
  tc.api_endpoint = options.tailscale_api_endpoint;
  tc.client_id = SecretCredential(options.client, client_id, options.credentials_namespace);
  tc.client_secret = SecretCredential(options.client, client_secret, options.credentials_namespace);
  return NewTailscaleAdmin(tc);
}

TailnetCredentials::TailnetCredentials(TailnetCredentialsOptions options)
    : o_(std::move(options)), clock_(o_.clock != nullptr ? *o_.clock : RealClock()) {}

bool TailnetCredentials::Wanted(const kube::Object* node_class) {
  return node_class != nullptr && TailscaleConfigOf(*node_class) != nullptr;
}

Result<std::shared_ptr<TailnetAdmin>> TailnetCredentials::AdminFor(const kube::Object& node_class) {
  const bj::object* ts = TailscaleConfigOf(node_class);
  if (ts == nullptr) return Invalid("the class has no tailscaleConfig");
  std::string name(kube::MetaString(node_class, "name"));
  // A changed tailscaleConfig (another login server, another Secret) gets a new admin; the Secret
  // values themselves are read per call by the CredentialSources, so a rotation needs none.
  std::string fingerprint = bj::serialize(*ts);
  {
    std::lock_guard lock(mu_);
    auto it = admins_.find(name);
    if (it != admins_.end() && it->second.fingerprint == fingerprint) return it->second.admin;
  }
  auto made = o_.factory ? o_.factory(node_class) : DefaultTailnetAdmin(o_, node_class);
  if (!made.ok()) return made.error();
  std::shared_ptr<TailnetAdmin> admin = std::move(*made);
  std::lock_guard lock(mu_);
  admins_[name] = Cached{fingerprint, admin};
  return admin;
}

Result<std::optional<MintedKey>> TailnetCredentials::Mint(const kube::Object& node_class,
                                                          std::chrono::seconds expiry) {
  const bj::object* ts = TailscaleConfigOf(node_class);
  if (ts == nullptr) return std::optional<MintedKey>();
  HS_ASSIGN_OR_RETURN(std::shared_ptr<TailnetAdmin> admin, AdminFor(node_class));
  AuthKeyRequest req;
  req.tags = TagsOf(*ts);
  const bj::value* eph = ts->if_contains("ephemeral");
  req.ephemeral = eph == nullptr || !eph->is_bool() || eph->get_bool();
  req.reusable = false;
  req.expiry = expiry;
  HS_ASSIGN_OR_RETURN(AuthKey key, admin->CreateAuthKey(req));
  log::Info("gpu tailnet key created",
            {{"class", std::string(kube::MetaString(node_class, "name"))}, {"key_id", key.id}});
  return std::optional<MintedKey>(
      MintedKey{key.id, std::move(key.key), std::string(StringField(*ts, "loginServer"))});
}

Result<std::optional<Device>> TailnetCredentials::FindDevice(const kube::Object& node_class,
                                                             const std::string& claim_name) {
  HS_ASSIGN_OR_RETURN(std::shared_ptr<TailnetAdmin> admin, AdminFor(node_class));
  HS_ASSIGN_OR_RETURN(std::vector<Device> devices, admin->ListDevices());
  std::vector<std::string> tags = TagsOf(*TailscaleConfigOf(node_class));
  for (Device& d : devices) {
    if (d.hostname != claim_name && d.name != claim_name) continue;
    // A device of that name without the class's tags is someone else's.
    bool tagged = std::all_of(tags.begin(), tags.end(), [&](const std::string& t) {
      return std::find(d.tags.begin(), d.tags.end(), t) != d.tags.end();
    });
    if (tagged) return std::optional<Device>(std::move(d));
  }
  return std::optional<Device>();
}

Status TailnetCredentials::Release(const kube::Object& node_class, const kube::Object& claim) {
  if (TailscaleConfigOf(node_class) == nullptr) return OkStatus();
  std::string id;
  if (const bj::object* st = ObjectField(claim, "status")) {
    id = std::string(StringField(*st, "tailnetDeviceID"));
  }
  std::string claim_name(kube::MetaString(claim, "name"));
  if (id.empty()) {
    // Deleted before its device was recorded: find it by name (the machine is gone, so no new
    // device of that name can appear after this).
    HS_ASSIGN_OR_RETURN(std::optional<Device> d, FindDevice(node_class, claim_name));
    if (!d) return OkStatus();
    id = d->id;
  }
  HS_ASSIGN_OR_RETURN(std::shared_ptr<TailnetAdmin> admin, AdminFor(node_class));
  HS_RETURN_IF_ERROR(admin->DeleteDevice(id));
  log::Info("gpu tailnet device deleted", {{"claim", claim_name}, {"device", id}});
  return OkStatus();
}

int TailnetCredentials::CollectGarbage(const std::vector<kube::ObjectPtr>& classes,
                                       const std::set<std::string>& claims,
                                       const std::map<std::string, std::set<std::string>>& pools,
                                       Clock::Duration grace) {
  int deleted = 0;
  auto now = clock_.Now();
  std::set<std::string> seen;
  for (const kube::ObjectPtr& cls : classes) {
    const bj::object* ts = TailscaleConfigOf(*cls);
    if (ts == nullptr) continue;
    std::vector<std::string> tags = TagsOf(*ts);
    std::string class_name(kube::MetaString(*cls, "name"));
    auto class_pools = pools.find(class_name);
    // Without tags or pools nothing marks a device as ours.
    if (tags.empty() || class_pools == pools.end()) continue;
    auto admin = AdminFor(*cls);
    if (!admin.ok()) continue;
    auto devices = (*admin)->ListDevices();
    if (!devices.ok()) {
      log::Warn("gpu gc: listing tailnet devices failed",
                {{"class", class_name}, {"error", devices.error().message}});
      continue;
    }
    for (const Device& d : *devices) {
      bool tagged = std::all_of(tags.begin(), tags.end(), [&](const std::string& t) {
        return std::find(d.tags.begin(), d.tags.end(), t) != d.tags.end();
      });
      if (!tagged || !LooksLikeClaimName(d.hostname, class_pools->second)) continue;
      if (claims.count(d.hostname) != 0) continue;
      std::string key = class_name + "/" + d.id;
      seen.insert(key);
      {
        std::lock_guard lock(mu_);
        auto [it, inserted] = orphans_.emplace(key, now);
        if (inserted || now - it->second < grace) continue;
      }
      Status st = (*admin)->DeleteDevice(d.id);
      log::Info(
          "gpu gc: deleted a tailnet device no claim owns",
          {{"class", class_name}, {"device", d.id}, {"hostname", d.hostname}, {"ok", st.ok()}});
      if (st.ok()) ++deleted;
    }
  }
  std::lock_guard lock(mu_);
  for (auto it = orphans_.begin(); it != orphans_.end();) {
    it = seen.count(it->first) != 0 ? std::next(it) : orphans_.erase(it);
  }
  return deleted;
}

}  // namespace hyperslice::gpu
