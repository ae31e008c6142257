// Per-machine tailnet credentials for real (issue "Ephemeral GPUs 3/4"): the headscale client
// (src/gpu/tailnet.h) makes single-use, pre-authorised, ephemeral, tagged auth keys on a real
// headscale; real tailscaleds join with them from their own network namespaces, are listed with
// their tailnet addresses, reach each other, and are deleted; a spent key is refused to a second
// machine. Tailnet addresses are only dialed by tailscaled inside the namespaces
// (src/localmesh/localmesh.h).
#include <unistd.h>

#include <algorithm>
#include <boost/json.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "src/gpu/credentials.h"
#include "src/gpu/provider.h"
#include "src/gpu/tailnet.h"
#include "src/localmesh/localmesh.h"

namespace hyperslice::gpu {
namespace {

namespace json = boost::json;
using localmesh::Headscale;
using localmesh::MeshLan;
using localmesh::NetNamespace;
using localmesh::Tailscaled;

constexpr char kTag[] = "tag:gpu";

// 100.64.0.0/10: the first octet 100, the second 64..127.
bool IsTailnetV4(const std::string& ip) {
  unsigned a = 0, b = 0, c = 0, d = 0;
  char tail = 0;
  if (std::sscanf(ip.c_str(), "%u.%u.%u.%u%c", &a, &b, &c, &d, &tail) != 4) return false;  // NOLINT
  return a == 100 && b >= 64 && b <= 127 && c <= 255 && d <= 255;
}

std::string TailnetV4(const Device& d) {
  for (const auto& a : d.addresses) {
    if (IsTailnetV4(a)) return a;
  }
  return {};
}

const Device* ByHostname(const std::vector<Device>& devices, const std::string& hostname) {
  for (const auto& d : devices) {
    if (d.hostname == hostname) return &d;
  }
  return nullptr;
}

class MeshTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why = localmesh::MeshUnavailableReason();
    if (!why.empty()) GTEST_SKIP() << why;
    bin_ = localmesh::MeshBinDir();
    std::string tmpl = ::testing::TempDir() + "hs-mesh-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    auto hs = Headscale::Start(bin_, dir_ + "/headscale");
    ASSERT_TRUE(hs.ok()) << hs.error().message;
    headscale_ = std::move(*hs);
    auto lan = MeshLan::Create();
    ASSERT_TRUE(lan.ok()) << lan.error().message;
    lan_ = std::move(*lan);
    auto admin = NewHeadscaleAdmin(Config(headscale_->api_key()));
    ASSERT_TRUE(admin.ok()) << admin.error().message;
    admin_ = std::move(*admin);
  }

  void TearDown() override {
    // Daemons, then their namespaces, then the LAN, then headscale (members in reverse).
    daemons_.clear();
    machines_.clear();
    lan_.reset();
    headscale_.reset();
    // The logs (headscale's, each tailscaled's) stay for a failed test or on request.
    bool keep = HasFailure() || std::getenv("HS_MESH_KEEP") != nullptr;
    if (!dir_.empty() && !keep) std::filesystem::remove_all(dir_);
  }

  HeadscaleConfig Config(const std::string& api_key) const {
    HeadscaleConfig c;
    c.login_server = headscale_->url();
    c.api_key = StaticCredential(api_key);
    c.retry.max_attempts = 2;
    c.retry.initial_backoff = std::chrono::milliseconds(50);
    return c;
  }

  // A machine namespace on the LAN with a userspace tailscaled in it.
  Tailscaled* Machine(const std::string& name) {
    auto ns = lan_->AddMachine(name);
    EXPECT_TRUE(ns.ok()) << ns.error().message;
    if (!ns.ok()) return nullptr;
    machines_.push_back(std::move(*ns));
    auto ts = Tailscaled::Start(bin_, *machines_.back(), *headscale_, dir_ + "/" + name);
    EXPECT_TRUE(ts.ok()) << ts.error().message;
    if (!ts.ok()) return nullptr;
    daemons_.push_back(std::move(*ts));
    return daemons_.back().get();
  }

  AuthKey NewKey() {
    AuthKeyRequest req;
    req.tags = {kTag};
    req.ephemeral = true;
    req.reusable = false;
    req.expiry = std::chrono::minutes(10);
    auto key = admin_->CreateAuthKey(req);
    EXPECT_TRUE(key.ok()) << key.error().message;
    return key.ok() ? *key : AuthKey{};
  }

  // headscale's own view of its pre-auth keys (`headscale preauthkeys list -o json`), by id.
  json::object KeyAsHeadscaleSeesIt(const std::string& id) {
    auto r = headscale_->Cli({"preauthkeys", "list", "-o", "json"});
    EXPECT_EQ(r.exit_code, 0) << r.errors;
    boost::system::error_code ec;
    json::value v = json::parse(r.output, ec);
    if (ec || !v.is_array()) {
      ADD_FAILURE() << "preauthkeys list -o json is not a JSON list";
      return {};
    }
    for (const auto& k : v.get_array()) {
      if (!k.is_object()) continue;
      const auto* kid = k.get_object().if_contains("id");
      if (kid == nullptr) continue;
      std::string s = kid->is_string()   ? std::string(kid->get_string())
                      : kid->is_uint64() ? std::to_string(kid->get_uint64())
                      : kid->is_int64()  ? std::to_string(kid->get_int64())
                                         : "";
      if (s == id) return k.get_object();
    }
    ADD_FAILURE() << "headscale lists no pre-auth key with id " << id;
    return {};
  }

  std::string bin_;
  std::string dir_;
  std::unique_ptr<Headscale> headscale_;
  std::unique_ptr<MeshLan> lan_;
  std::unique_ptr<TailnetAdmin> admin_;
  std::vector<std::unique_ptr<NetNamespace>> machines_;
  std::vector<std::unique_ptr<Tailscaled>> daemons_;
};

TEST_F(MeshTest, KeysJoinListReachDeleteAndASpentKeyIsRefused) {
  // (a) One key per machine: single use, pre-authorised (headscale's keys always are), ephemeral,
  // tagged, expiring within the launch timeout.
  auto before = std::chrono::system_clock::now();
  AuthKey key_a = NewKey();
  AuthKey key_b = NewKey();
  ASSERT_FALSE(key_a.key.empty());
  ASSERT_FALSE(key_b.key.empty());
  EXPECT_NE(key_a.id, key_b.id);
  EXPECT_NE(key_a.key, key_b.key);
  EXPECT_GT(key_a.expires, before + std::chrono::minutes(9));
  EXPECT_LT(key_a.expires, before + std::chrono::minutes(11));
  for (const AuthKey* k : {&key_a, &key_b}) {
    json::object seen = KeyAsHeadscaleSeesIt(k->id);
    // protojson omits false booleans in the CLI's output; a true "reusable" would be a bug.
    const auto* reusable = seen.if_contains("reusable");
    EXPECT_TRUE(reusable == nullptr || (reusable->is_bool() && !reusable->get_bool()));
    const auto* ephemeral = seen.if_contains("ephemeral");
    EXPECT_TRUE(ephemeral != nullptr && ephemeral->is_bool() && ephemeral->get_bool());
    const auto* tags = seen.if_contains("acl_tags");
    if (tags == nullptr) tags = seen.if_contains("aclTags");
    ASSERT_TRUE(tags != nullptr && tags->is_array());
    EXPECT_EQ(json::serialize(*tags), "[\"tag:gpu\"]");
  }

  // (b) Two machines join with their keys and are listed with their tailnet addresses.
  Tailscaled* a = Machine("a");
  Tailscaled* b = Machine("b");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  auto up_a = a->Up(key_a.key, "gpu-a");
  ASSERT_EQ(up_a.exit_code, 0) << up_a.errors << "\ntailscaled:\n" << a->Log();
  auto up_b = b->Up(key_b.key, "gpu-b");
  ASSERT_EQ(up_b.exit_code, 0) << up_b.errors << "\ntailscaled:\n" << b->Log();

  auto devices = admin_->ListDevices();
  ASSERT_TRUE(devices.ok()) << devices.error().message;
  ASSERT_EQ(devices->size(), 2u);
  const Device* dev_a = ByHostname(*devices, "gpu-a");
  const Device* dev_b = ByHostname(*devices, "gpu-b");
  ASSERT_NE(dev_a, nullptr);
  ASSERT_NE(dev_b, nullptr);
  for (const Device* d : {dev_a, dev_b}) {
    EXPECT_FALSE(d->id.empty());
    EXPECT_FALSE(d->name.empty());
    EXPECT_EQ(d->tags, std::vector<std::string>{kTag});
    EXPECT_TRUE(IsTailnetV4(TailnetV4(*d))) << d->hostname;
  }
  EXPECT_NE(dev_a->id, dev_b->id);
  // The address headscale lists is the one the machine itself has.
  for (auto [ts, dev] : {std::pair{a, dev_a}, std::pair{b, dev_b}}) {
    auto ip = ts->Cli({"ip", "-4"});
    ASSERT_EQ(ip.exit_code, 0) << ip.errors;
    std::string got = ip.output.substr(0, ip.output.find('\n'));
    EXPECT_EQ(got, TailnetV4(*dev)) << dev->hostname;
  }

  // They reach each other: a disco ping over the tailnet, sent by tailscaled inside machine a's
  // namespace, answered directly over the machines' LAN (192.0.2.0/24).
  auto ping = a->Cli({"ping", "--c=20", "--timeout=5s", TailnetV4(*dev_b)});
  EXPECT_EQ(ping.exit_code, 0) << ping.output << ping.errors;
  EXPECT_NE(ping.output.find("pong from gpu-b"), std::string::npos) << ping.output;
  EXPECT_NE(ping.output.find("via 192.0.2."), std::string::npos) << ping.output;
  auto back = b->Cli({"ping", "--c=20", "--timeout=5s", TailnetV4(*dev_a)});
  EXPECT_EQ(back.exit_code, 0) << back.output << back.errors;

  // (c) The acceptance: a single-use key is refused to a second machine.
  Tailscaled* c = Machine("c");
  ASSERT_NE(c, nullptr);
  auto up_c = c->Up(key_a.key, "gpu-c", 20);
  EXPECT_NE(up_c.exit_code, 0) << "a spent single-use key joined a second machine";
  // headscale's reason, passed on by tailscale ("backend error: authkey already used"), and not
  // some other failure to join.
  EXPECT_NE(up_c.errors.find("already used"), std::string::npos) << up_c.errors;
  EXPECT_EQ(up_c.errors.find(key_a.key), std::string::npos) << "tailscale echoed the key";
  auto status = c->Cli({"status", "--json"});
  boost::system::error_code ec;
  json::value st = json::parse(status.output, ec);
  ASSERT_FALSE(ec) << status.output;
  const auto* state = st.as_object().if_contains("BackendState");
  ASSERT_NE(state, nullptr);
  EXPECT_NE(json::serialize(*state), "\"Running\"");
  devices = admin_->ListDevices();
  ASSERT_TRUE(devices.ok()) << devices.error().message;
  EXPECT_EQ(devices->size(), 2u);
  EXPECT_EQ(ByHostname(*devices, "gpu-c"), nullptr);

  // (d) Teardown removes the device; removing it again is success.
  std::string id_b = ByHostname(*devices, "gpu-b")->id;
  auto del = admin_->DeleteDevice(id_b);
  ASSERT_TRUE(del.ok()) << del.error().message;
  devices = admin_->ListDevices();
  ASSERT_TRUE(devices.ok()) << devices.error().message;
  EXPECT_EQ(ByHostname(*devices, "gpu-b"), nullptr);
  EXPECT_NE(ByHostname(*devices, "gpu-a"), nullptr);
  auto again = admin_->DeleteDevice(id_b);
  EXPECT_TRUE(again.ok()) << again.error().message;
}

TEST_F(MeshTest, ErrorsAreValuesWithReasonsAndNoSecrets) {
  // A wrong API key: unauthorised, and the key is in no message.
  const std::string wrong = "hskey-api-wrongwrongwr-wrongwrongwrongwrongwrongwrongwrong";
  auto bad = NewHeadscaleAdmin(Config(wrong));
  ASSERT_TRUE(bad.ok());
  auto list = (*bad)->ListDevices();
  ASSERT_FALSE(list.ok());
  EXPECT_EQ(KindOf(list.error()), ErrorKind::kUnauthorized) << list.error().message;
  EXPECT_EQ(list.error().message.find(wrong), std::string::npos);
  AuthKeyRequest tagged;
  tagged.tags = {kTag};
  auto refused = (*bad)->CreateAuthKey(tagged);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(KindOf(refused.error()), ErrorKind::kUnauthorized) << refused.error().message;

  // A tag headscale would refuse is refused before it is sent, naming the tag.
  AuthKeyRequest bad_tag;
  bad_tag.tags = {"gpu"};
  auto r = admin_->CreateAuthKey(bad_tag);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(KindOf(r.error()), ErrorKind::kInvalid);
  EXPECT_NE(r.error().message.find("\"gpu\""), std::string::npos) << r.error().message;

  // An untagged key needs a user: none configured, one that does not exist, one that does.
  AuthKeyRequest untagged;
  auto no_user = admin_->CreateAuthKey(untagged);
  ASSERT_FALSE(no_user.ok());
  EXPECT_EQ(KindOf(no_user.error()), ErrorKind::kInvalid) << no_user.error().message;
  HeadscaleConfig with_user = Config(headscale_->api_key());
  with_user.user = "gpu-machines";
  auto owned = NewHeadscaleAdmin(with_user);
  ASSERT_TRUE(owned.ok());
  auto missing = (*owned)->CreateAuthKey(untagged);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(KindOf(missing.error()), ErrorKind::kInvalid);
  EXPECT_NE(missing.error().message.find("gpu-machines"), std::string::npos);
  auto made = headscale_->Cli({"users", "create", "gpu-machines"});
  ASSERT_EQ(made.exit_code, 0) << made.errors;
  auto key = (*owned)->CreateAuthKey(untagged);
  ASSERT_TRUE(key.ok()) << key.error().message;
  json::object seen = KeyAsHeadscaleSeesIt(key->id);
  const auto* user = seen.if_contains("user");
  ASSERT_TRUE(user != nullptr && user->is_object());
  const auto* name = user->get_object().if_contains("name");
  ASSERT_NE(name, nullptr);
  EXPECT_EQ(json::serialize(*name), "\"gpu-machines\"");

  // A node id that is not headscale's form is refused; one that does not exist is already gone.
  EXPECT_EQ(KindOf(admin_->DeleteDevice("abc").error()), ErrorKind::kInvalid);
  EXPECT_TRUE(admin_->DeleteDevice("987654").ok());
  // No key text in any error message above.
  for (const Error* e : {&list.error(), &refused.error(), &missing.error()}) {
    EXPECT_EQ(e->message.find(headscale_->api_key()), std::string::npos);
  }
}

}  // namespace
}  // namespace hyperslice::gpu
