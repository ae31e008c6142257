// tailnet_credentials.h without a server: a fake TailnetAdmin records what the claim controller's
// hooks ask of it — the key request a class's tailscaleConfig makes, the device found by the
// claim's name and the class's tags, the device deleted at teardown, and which devices the GC
// may touch (ours by tags and name, unclaimed for the grace) and which it must not.
#include "src/gpu/tailnet_credentials.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "src/base/fake_clock.h"

namespace hyperslice::gpu {
namespace {

namespace bj = boost::json;
using namespace std::chrono_literals;

class FakeAdmin : public TailnetAdmin {
 public:
  Result<AuthKey> CreateAuthKey(const AuthKeyRequest& r) override {
    requests.push_back(r);
    return AuthKey{"k" + std::to_string(requests.size()), "secret-key", {}};
  }
  Result<std::vector<Device>> ListDevices() override { return devices; }
  Status DeleteDevice(const std::string& id) override {
    deleted.push_back(id);
    std::erase_if(devices, [&](const Device& d) { return d.id == id; });
    return OkStatus();
  }
  std::vector<AuthKeyRequest> requests;
  std::vector<Device> devices;
  std::vector<std::string> deleted;
};

kube::Object Class(bool with_tailnet, bool ephemeral = true) {
  bj::object spec{{"providers", bj::array{}}};
  if (with_tailnet) {
    spec["tailscaleConfig"] = bj::object{{"tags", bj::array{"tag:k8s", "tag:gpu"}},
                                         {"ephemeral", ephemeral},
                                         {"loginServer", "http://127.0.0.1:1"}};
  }
  return bj::object{{"metadata", bj::object{{"name", "c"}}}, {"spec", spec}};
}

struct Fixture {
  std::shared_ptr<FakeAdmin> admin = std::make_shared<FakeAdmin>();
  FakeClock clock;
  int built = 0;
  TailnetCredentials creds{TailnetCredentialsOptions{
      .factory = [this](const kube::Object&) -> Result<std::unique_ptr<TailnetAdmin>> {
        ++built;
        // The fixture keeps the fake; the credentials get a forwarding admin.
        struct Fwd : TailnetAdmin {
          FakeAdmin* a;
          explicit Fwd(FakeAdmin* x) : a(x) {}
          Result<AuthKey> CreateAuthKey(const AuthKeyRequest& r) override {
            return a->CreateAuthKey(r);
          }
          Result<std::vector<Device>> ListDevices() override { return a->ListDevices(); }
          Status DeleteDevice(const std::string& id) override { return a->DeleteDevice(id); }
        };
        return std::unique_ptr<TailnetAdmin>(new Fwd(admin.get()));
      },
      .clock = &clock}};
};

Device Dev(std::string id, std::string host, std::vector<std::string> tags) {
  Device d;
  d.id = std::move(id);
  d.hostname = std::move(host);
  d.tags = std::move(tags);
  d.addresses = {"fd7a:115c:a1e0::1", "100.64.0.7"};
  return d;
}

TEST(TailnetCredentials, MintsASingleUseTaggedKeyAsTheClassSays) {
  Fixture f;
  kube::Object none = Class(false);
  EXPECT_FALSE(TailnetCredentials::Wanted(&none));
  auto nothing = f.creds.Mint(none, 300s);
  ASSERT_TRUE(nothing.ok());
  EXPECT_FALSE(nothing->has_value());
  EXPECT_TRUE(f.admin->requests.empty());

  kube::Object cls = Class(true, false);
  auto key = f.creds.Mint(cls, 300s);
  ASSERT_TRUE(key.ok()) << key.error().message;
  ASSERT_TRUE(key->has_value());
  EXPECT_EQ((*key)->id, "k1");
  EXPECT_EQ((*key)->login_server, "http://127.0.0.1:1");
  ASSERT_EQ(f.admin->requests.size(), 1u);
  const AuthKeyRequest& r = f.admin->requests[0];
  EXPECT_EQ(r.tags, (std::vector<std::string>{"tag:k8s", "tag:gpu"}));
  EXPECT_FALSE(r.reusable);
  EXPECT_FALSE(r.ephemeral);
  EXPECT_EQ(r.expiry, 300s);
  ASSERT_TRUE(f.creds.Mint(cls, 300s).ok());
  EXPECT_EQ(f.built, 1) << "one admin per class while its tailscaleConfig is unchanged";
}

TEST(TailnetCredentials, FindsTheClaimsDeviceByNameAndTagsAndDeletesIt) {
  Fixture f;
  kube::Object cls = Class(true);
  f.admin->devices = {Dev("1", "pool-bcdfg", {"tag:k8s"}),  // not all our tags: not ours
                      Dev("2", "pool-bcdfg", {"tag:gpu", "tag:k8s"})};
  auto d = f.creds.FindDevice(cls, "pool-bcdfg");
  ASSERT_TRUE(d.ok());
  ASSERT_TRUE(d->has_value());
  EXPECT_EQ((*d)->id, "2");
  EXPECT_EQ(TailnetIPv4(**d), "100.64.0.7");
  // Teardown by the recorded id; then by name when none was recorded; then nothing left.
  kube::Object claim = bj::object{{"metadata", bj::object{{"name", "pool-bcdfg"}}},
                                  {"status", bj::object{{"tailnetDeviceID", "2"}}}};
  ASSERT_TRUE(f.creds.Release(cls, claim).ok());
  EXPECT_EQ(f.admin->deleted, (std::vector<std::string>{"2"}));
  f.admin->devices.push_back(Dev("3", "pool-bcdfg", {"tag:gpu", "tag:k8s"}));
  claim["status"].as_object().erase("tailnetDeviceID");
  ASSERT_TRUE(f.creds.Release(cls, claim).ok());
  EXPECT_EQ(f.admin->deleted, (std::vector<std::string>{"2", "3"}));
  ASSERT_TRUE(f.creds.Release(cls, claim).ok());
  EXPECT_EQ(f.admin->deleted.size(), 2u);
}

TEST(TailnetCredentials, CollectsOnlyOurUnclaimedDevicesAfterTheGrace) {
  Fixture f;
  std::vector<kube::ObjectPtr> classes = {std::make_shared<const kube::Object>(Class(true))};
  f.admin->devices = {
      Dev("1", "pool-bcdfg", {"tag:k8s", "tag:gpu"}),       // ours, no claim: collected
      Dev("2", "pool-hjklm", {"tag:k8s", "tag:gpu"}),       // ours, claimed: kept
      Dev("3", "pool-bcdfg", {"tag:gpu"}),                  // missing a tag: not ours
      Dev("4", "laptop", {"tag:k8s", "tag:gpu"}),           // not named like a claim
      Dev("5", "otherpool-bcdfg", {"tag:k8s", "tag:gpu"}),  // a pool of another class
      Dev("6", "pool-aaaaa", {"tag:k8s", "tag:gpu"}),       // not the provisioner's alphabet
  };
  std::set<std::string> claims = {"pool-hjklm"};
  std::map<std::string, std::set<std::string>> pools = {{"c", {"pool"}}};
  EXPECT_EQ(f.creds.CollectGarbage(classes, claims, pools, 60s), 0);  // first seen
  f.clock.Advance(30s);
  EXPECT_EQ(f.creds.CollectGarbage(classes, claims, pools, 60s), 0);  // within the grace
  f.clock.Advance(31s);
  EXPECT_EQ(f.creds.CollectGarbage(classes, claims, pools, 60s), 1);
  EXPECT_EQ(f.admin->deleted, (std::vector<std::string>{"1"}));
  // A class without tags marks nothing as ours.
  Fixture g;
  kube::Object untagged = Class(true);
  untagged["spec"].as_object()["tailscaleConfig"].as_object().erase("tags");
  g.admin->devices = {Dev("1", "pool-bcdfg", {})};
  std::vector<kube::ObjectPtr> u = {std::make_shared<const kube::Object>(untagged)};
  g.creds.CollectGarbage(u, {}, pools, 0s);
  g.clock.Advance(1s);
  EXPECT_EQ(g.creds.CollectGarbage(u, {}, pools, 0s), 0);
  EXPECT_TRUE(g.admin->deleted.empty());
}

TEST(TailnetCredentials, ClaimNameShape) {
  EXPECT_TRUE(LooksLikeClaimName("ml-workload-pool-bcd42", {"ml-workload-pool"}));
  EXPECT_FALSE(LooksLikeClaimName("ml-workload-pool-bcd4", {"ml-workload-pool"}));
  EXPECT_FALSE(LooksLikeClaimName("ml-workload-pool-bcd4a", {"ml-workload-pool"}));
  EXPECT_FALSE(LooksLikeClaimName("other-bcd42", {"ml-workload-pool"}));
  EXPECT_FALSE(LooksLikeClaimName("-bcd42", {""}));
}

}  // namespace
}  // namespace hyperslice::gpu
