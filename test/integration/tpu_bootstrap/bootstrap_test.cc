// Bootstrapper against the real apiserver and the GCE simulator: the token Secret's exact
// fields, the join values in the instance metadata, a token that really authenticates, no GCE
// call once settled, retirement on join or when a VM is no longer listed, replacement of an
// expiring token, and Cleanup.
#include <ctime>
#include <regex>

#include "src/base/fake_clock.h"
#include "src/base/log.h"

#include "test/integration/tpu_bootstrap/fixture.h"

namespace hyperslice::tpu::testing {
namespace {

std::string Base64Decode(std::string_view in) {
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    int v = -1;
    if (c >= 'A' && c <= 'Z') v = c - 'A';
    if (c >= 'a' && c <= 'z') v = c - 'a' + 26;
    if (c >= '0' && c <= '9') v = c - '0' + 52;
    if (c == '+') v = 62;
    if (c == '/') v = 63;
    if (v < 0) break;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  return out;
}

std::map<std::string, std::string> SecretData(const json::object& secret) {
  std::map<std::string, std::string> out;
  for (const auto& kv : secret.at("data").as_object()) {
    out[std::string(kv.key())] = Base64Decode(kv.value().as_string());
  }
  return out;
}

std::string Label(const json::object& o, const std::string& key) {
  const auto& labels = o.at("metadata").as_object().at("labels").as_object();
  return labels.contains(key) ? std::string(labels.at(key).as_string()) : std::string();
}

time_t ParseUtc(const std::string& s) {
  std::tm tm{};
  if (strptime(s.c_str(), "%Y-%m-%dT%H:%M:%SZ", &tm) == nullptr) return 0;
  return timegm(&tm);
}

// Authenticates with `token` as a bearer token and asks the apiserver who that is.
Result<json::object> WhoAmI(const std::string& token) {
  kube::Config cfg = testenv::Cluster().AdminConfig();
  cfg.tls.client_cert_pem.clear();
  cfg.tls.client_key_pem.clear();
  cfg.bearer_token = token;
  HS_ASSIGN_OR_RETURN(auto client, kube::Client::Create(cfg));
  static const kube::Resource kReviews{"authentication.k8s.io", "v1", "selfsubjectreviews",
                                       "SelfSubjectReview", false};
  HS_ASSIGN_OR_RETURN(auto review,
                      client->Create(kReviews, "",
                                     json::object{{"apiVersion", "authentication.k8s.io/v1"},
                                                  {"kind", "SelfSubjectReview"}}));
  return review.at("status").at("userInfo").as_object();
}

TEST_F(BootstrapTest, RunningVmGetsATokenSecretAndJoinValuesThatAuthenticate) {
  auto vms = MakeVms("auth", 1);
  ASSERT_EQ(vms.size(), 1u);
  auto boot = NewBootstrapper();
  const time_t before = time(nullptr);
  std::vector<std::string> log_lines;
  log::SetSink([&](std::string_view line) { log_lines.emplace_back(line); });
  auto report = boot.Reconcile(group_, vms, {});
  log::SetSink(nullptr);
  ASSERT_TRUE(report.ok()) << report.error().ToString();
  EXPECT_EQ(report->tokens_created, 1);
  EXPECT_EQ(report->metadata_written, 1);
  EXPECT_EQ(report->waiting, std::vector<std::string>{vms[0].name});

  // The Secret: kubeadm's bootstrap token format, exactly these fields.
  auto secrets = TokenSecrets(group_);
  ASSERT_EQ(secrets.size(), 1u);
  const auto& secret = secrets[0];
  EXPECT_EQ(secret.at("type"), "bootstrap.kubernetes.io/token");
  auto data = SecretData(secret);
  std::set<std::string> keys;
  for (const auto& [k, v] : data) keys.insert(k);
  EXPECT_EQ(keys, (std::set<std::string>{
                      "auth-extra-groups", "description", "expiration", "token-id", "token-secret",
                      "usage-bootstrap-authentication", "usage-bootstrap-signing"}));
  const std::string id = data["token-id"];
  EXPECT_TRUE(std::regex_match(id, std::regex("[a-z0-9]{6}"))) << "token-id has the wrong shape";
  EXPECT_TRUE(std::regex_match(data["token-secret"], std::regex("[a-z0-9]{16}")))
      << "token-secret has the wrong shape";
  EXPECT_EQ(secret.at("metadata").at("name").as_string(), "bootstrap-token-" + id);
  EXPECT_EQ(data["usage-bootstrap-authentication"], "true");
  EXPECT_EQ(data["usage-bootstrap-signing"], "true");
  EXPECT_EQ(data["auth-extra-groups"], "system:bootstrappers:kubeadm:default-node-token");
  EXPECT_NE(data["description"].find(vms[0].name), std::string::npos) << data["description"];
  EXPECT_NE(data["description"].find("default/slice"), std::string::npos) << data["description"];
  const time_t expiration = ParseUtc(data["expiration"]);
  EXPECT_GE(expiration, before + 3600 - 1) << data["expiration"];
  EXPECT_LE(expiration, time(nullptr) + 3600 + 1) << data["expiration"];
  EXPECT_EQ(Label(secret, kSecretLabelGroupUid),
            std::string(group_.at("metadata").at("uid").as_string()));
  EXPECT_EQ(Label(secret, kSecretLabelInstance), vms[0].name);

  // The VM's metadata: the token, the CA hash and the control-plane address; the template's
  // items are kept.
  const std::string token = id + "." + data["token-secret"];
  auto md = Metadata(vms[0]);
  EXPECT_TRUE(md[kMetaJoinToken] == token) << "metadata token differs from the Secret's";
  EXPECT_EQ(md[kMetaCaHash], ca_hash_);
  EXPECT_EQ(md[kMetaControlPlane], kControlPlane);
  EXPECT_EQ(md[kMetaKubeLabels], kKubeLabels);
  EXPECT_FALSE(md[kMetaStartupScript].empty());

  // The bootstrap logged what it did, without the token.
  ASSERT_FALSE(log_lines.empty());
  for (const auto& line : log_lines) {
    EXPECT_TRUE(line.find(data["token-secret"]) == std::string::npos)
        << "a log line holds the token";
  }

  // The token is a working kubeadm bootstrap token: the apiserver authenticates it.
  Result<json::object> who = Error::Make(Error::Code::kUnknown, "not tried");
  bool authenticated = Eventually([&] {
    who = WhoAmI(token);
    return who.ok();
  });
  ASSERT_TRUE(authenticated) << who.error().ToString();
  EXPECT_EQ(who->at("username").as_string(), "system:bootstrap:" + id);
  std::set<std::string> groups;
  for (const auto& g : who->at("groups").as_array()) groups.insert(std::string(g.as_string()));
  EXPECT_TRUE(groups.count("system:bootstrappers:kubeadm:default-node-token"))
      << json::serialize(*who);
  EXPECT_TRUE(groups.count("system:bootstrappers")) << json::serialize(*who);
  // A made-up token of the same shape does not.
  EXPECT_FALSE(WhoAmI(id + ".0000000000000000").ok());
}

TEST_F(BootstrapTest, SecondReconcileMakesNoGceCall) {
  auto vms = MakeVms("settle", 2);
  ASSERT_EQ(vms.size(), 2u);
  auto boot = NewBootstrapper();
  auto first = boot.Reconcile(group_, vms, {});
  ASSERT_TRUE(first.ok()) << first.error().ToString();
  EXPECT_EQ(first->tokens_created, 2);
  EXPECT_EQ(first->metadata_written, 2);

  const auto calls_before = GceCalls();
  ASSERT_TRUE(calls_before.is_object());
  ASSERT_TRUE(calls_before.as_object().contains("compute.instances.setMetadata"));
  auto second = boot.Reconcile(group_, vms, {});
  ASSERT_TRUE(second.ok()) << second.error().ToString();
  EXPECT_EQ(second->tokens_created, 0);
  EXPECT_EQ(second->tokens_deleted, 0);
  EXPECT_EQ(second->metadata_written, 0);
  EXPECT_EQ(second->waiting.size(), 2u);
  EXPECT_EQ(json::serialize(GceCalls()), json::serialize(calls_before));
  EXPECT_EQ(TokenSecrets(group_).size(), 2u);

  // Once both have joined and their tokens are retired, further passes make no call either.
  std::set<std::string> joined{vms[0].provider_id, vms[1].provider_id};
  ASSERT_TRUE(boot.Reconcile(group_, vms, joined).ok());
  const auto calls_joined = GceCalls();
  auto third = boot.Reconcile(group_, vms, joined);
  ASSERT_TRUE(third.ok()) << third.error().ToString();
  EXPECT_EQ(json::serialize(GceCalls()), json::serialize(calls_joined));
}

TEST_F(BootstrapTest, JoinedVmLosesItsTokenAndJoinValues) {
  auto vms = MakeVms("join", 2);
  ASSERT_EQ(vms.size(), 2u);
  auto boot = NewBootstrapper();
  ASSERT_TRUE(boot.Reconcile(group_, vms, {}).ok());
  ASSERT_EQ(TokenSecrets(group_).size(), 2u);

  auto report = boot.Reconcile(group_, vms, {vms[0].provider_id});
  ASSERT_TRUE(report.ok()) << report.error().ToString();
  EXPECT_EQ(report->tokens_deleted, 1);
  EXPECT_EQ(report->metadata_cleared, 1);
  EXPECT_EQ(report->waiting, std::vector<std::string>{vms[1].name});

  auto secrets = TokenSecrets(group_);
  ASSERT_EQ(secrets.size(), 1u);
  EXPECT_EQ(Label(secrets[0], kSecretLabelInstance), vms[1].name);
  auto joined_md = Metadata(vms[0]);
  EXPECT_EQ(joined_md.count(kMetaJoinToken), 0u);
  EXPECT_EQ(joined_md.count(kMetaCaHash), 0u);
  EXPECT_EQ(joined_md.count(kMetaControlPlane), 0u);
  EXPECT_EQ(joined_md[kMetaKubeLabels], kKubeLabels);  // only the kubeadm-* keys go
  EXPECT_EQ(Metadata(vms[1]).count(kMetaJoinToken), 1u);
}

TEST_F(BootstrapTest, TokensOfVmsNoLongerListedAreRetired) {
  auto vms = MakeVms("unlisted", 2);
  ASSERT_EQ(vms.size(), 2u);
  auto boot = NewBootstrapper();
  ASSERT_TRUE(boot.Reconcile(group_, vms, {}).ok());

  // vms[1] drops out of the MIG's list (scaled in, replaced): its token and values go; and a VM
  // that no longer exists at all is fine too.
  auto gone = vms[0];
  gone.name = "vanished-vm";
  gone.provider_id = ProviderId(gone.project, gone.zone, gone.name);
  ASSERT_TRUE(boot.Reconcile(group_, {vms[0], gone}, {}).ok());
  ASSERT_EQ(TokenSecrets(group_).size(), 2u);  // vms[0] and vanished-vm
  auto report = boot.Reconcile(group_, {vms[0]}, {});
  ASSERT_TRUE(report.ok()) << report.error().ToString();
  auto secrets = TokenSecrets(group_);
  ASSERT_EQ(secrets.size(), 1u);
  EXPECT_EQ(Label(secrets[0], kSecretLabelInstance), vms[0].name);
  EXPECT_EQ(Metadata(vms[1]).count(kMetaJoinToken), 0u);
  EXPECT_EQ(Metadata(vms[0]).count(kMetaJoinToken), 1u);
}

TEST_F(BootstrapTest, VmNotRunningGetsNoToken) {
  auto vms = MakeVms("booting", 1);
  ASSERT_EQ(vms.size(), 1u);
  vms[0].instance_status = "STAGING";
  auto boot = NewBootstrapper();
  auto report = boot.Reconcile(group_, vms, {});
  ASSERT_TRUE(report.ok()) << report.error().ToString();
  EXPECT_EQ(report->tokens_created, 0);
  EXPECT_TRUE(report->waiting.empty());
  EXPECT_TRUE(TokenSecrets(group_).empty());
  EXPECT_EQ(Metadata(vms[0]).count(kMetaJoinToken), 0u);
}

TEST_F(BootstrapTest, ExpiringTokenIsReplaced) {
  auto vms = MakeVms("expiring", 1);
  ASSERT_EQ(vms.size(), 1u);
  auto boot = NewBootstrapper();
  ASSERT_TRUE(boot.Reconcile(group_, vms, {}).ok());
  auto secrets = TokenSecrets(group_);
  ASSERT_EQ(secrets.size(), 1u);
  const std::string old_name(secrets[0].at("metadata").at("name").as_string());
  const std::string old_token = Metadata(vms[0])[kMetaJoinToken];

  // Ten minutes left: less than token_min_remaining (15 min), so a VM might not make it.
  char expiration[32];
  time_t soon = time(nullptr) + 600;
  std::tm tm{};
  gmtime_r(&soon, &tm);
  std::strftime(expiration, sizeof expiration, "%Y-%m-%dT%H:%M:%SZ", &tm);
  auto patched = kube_->Patch(
      kube::resources::Secrets(), "kube-system", old_name, kube::PatchType::kMerge,
      json::serialize(json::object{{"stringData", json::object{{"expiration", expiration}}}}));
  ASSERT_TRUE(patched.ok()) << patched.error().ToString();

  auto report = boot.Reconcile(group_, vms, {});
  ASSERT_TRUE(report.ok()) << report.error().ToString();
  EXPECT_EQ(report->tokens_created, 1);
  EXPECT_EQ(report->tokens_deleted, 1);
  EXPECT_EQ(report->metadata_written, 1);
  secrets = TokenSecrets(group_);
  ASSERT_EQ(secrets.size(), 1u);
  EXPECT_NE(std::string(secrets[0].at("metadata").at("name").as_string()), old_name);
  auto data = SecretData(secrets[0]);
  const std::string new_token = Metadata(vms[0])[kMetaJoinToken];
  EXPECT_TRUE(new_token == data["token-id"] + "." + data["token-secret"])
      << "metadata does not hold the replacement token";
  EXPECT_TRUE(new_token != old_token) << "token not replaced";
}

// With a test clock (the operator passes its own): a token is kept while it has more than
// token_min_remaining left and replaced once it has not.
TEST_F(BootstrapTest, TokenReplacedWhenTheClockNearsItsExpiration) {
  auto vms = MakeVms("clock", 1);
  ASSERT_EQ(vms.size(), 1u);
  FakeClock clock;
  auto boot = NewBootstrapper([&](internal::BootstrapOptions& o) { o.clock = &clock; });
  ASSERT_TRUE(boot.Reconcile(group_, vms, {}).ok());
  const std::string first = Metadata(vms[0])[kMetaJoinToken];

  clock.Advance(std::chrono::minutes(44));  // 16 minutes left: kept
  auto kept = boot.Reconcile(group_, vms, {});
  ASSERT_TRUE(kept.ok()) << kept.error().ToString();
  EXPECT_EQ(kept->tokens_created, 0);
  EXPECT_TRUE(Metadata(vms[0])[kMetaJoinToken] == first) << "token replaced too early";

  clock.Advance(std::chrono::minutes(2));  // 14 minutes left: replaced
  auto replaced = boot.Reconcile(group_, vms, {});
  ASSERT_TRUE(replaced.ok()) << replaced.error().ToString();
  EXPECT_EQ(replaced->tokens_created, 1);
  EXPECT_EQ(replaced->tokens_deleted, 1);
  EXPECT_TRUE(Metadata(vms[0])[kMetaJoinToken] != first) << "token not replaced";
  auto secrets = TokenSecrets(group_);
  ASSERT_EQ(secrets.size(), 1u);
  // Its expiration is an hour after the test clock's "now" (46 minutes ahead of real time).
  const time_t expiration = ParseUtc(SecretData(secrets[0])["expiration"]);
  EXPECT_GE(expiration, time(nullptr) + time_t{46 * 60 + 3600} - 5);
  EXPECT_LE(expiration, time(nullptr) + time_t{46 * 60 + 3600} + 5);
}

TEST_F(BootstrapTest, CleanupDeletesEveryTokenOfTheGroupOnly) {
  auto vms = MakeVms("cleanup", 2);
  ASSERT_EQ(vms.size(), 2u);
  auto boot = NewBootstrapper();
  ASSERT_TRUE(boot.Reconcile(group_, vms, {}).ok());
  auto other = NewGroup("other");
  ASSERT_TRUE(boot.Reconcile(other, {vms[0]}, {}).ok());
  ASSERT_EQ(TokenSecrets(group_).size(), 2u);
  ASSERT_EQ(TokenSecrets(other).size(), 1u);

  ASSERT_TRUE(boot.Cleanup(group_).ok());
  EXPECT_TRUE(TokenSecrets(group_).empty());
  EXPECT_EQ(TokenSecrets(other).size(), 1u);
  ASSERT_TRUE(boot.Cleanup(group_).ok());  // nothing left: fine
  ASSERT_TRUE(boot.Cleanup(other).ok());
  EXPECT_TRUE(TokenSecrets(other).empty());
}

TEST_F(BootstrapTest, MissingInputsAreErrors) {
  auto boot = NewBootstrapper();
  auto no_cp = group_;
  no_cp["spec"] = json::object{};
  auto r = boot.Reconcile(no_cp, {}, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Error::Code::kInvalidArgument);
  auto no_hash = NewBootstrapper([](internal::BootstrapOptions& o) { o.ca_hash.clear(); });
  EXPECT_FALSE(no_hash.Reconcile(group_, {}, {}).ok());
}

}  // namespace
}  // namespace hyperslice::tpu::testing
