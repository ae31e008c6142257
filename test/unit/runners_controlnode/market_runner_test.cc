// MarketRunnerProvisioner (market_runner.h) over a scripted gpu::Provider: a machine adopted from
// the provider's listing keeps what the launch bought. (The real providers, simulators and the
// control node around it: test/e2e/runners, runners_market_e2e.)
#include "src/runners/controlnode/market_runner.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/json.hpp>

#include "src/base/json.h"
#include "src/gpu/provider.h"

namespace hyperslice::runners::controlnode {
namespace {

namespace json = boost::json;
using jsonfield::ObjectField;
using jsonfield::StringField;

// One container offer; a create makes the machine (and, when `lose_answer`, reports no answer, as
// a timeout after the request was sent does); List and Get return what was made.
class ScriptedProvider final : public gpu::Provider {
 public:
  bool lose_answer = false;
  std::vector<gpu::Instance> made;
  int creates = 0;

  const char* name() const override { return gpu::kRunPod; }
  gpu::Capabilities capabilities() const override { return {}; }
  Status CheckCredentials() override { return OkStatus(); }
  Result<std::vector<gpu::Offer>> ListOffers() override {
    gpu::Offer o;
    o.provider = gpu::kRunPod;
    o.id = "NVIDIA GeForce RTX 4090";
    o.gpu_type = "RTX4090";
    o.gpu_type_known = true;
    o.gpu_count = 1;
    o.region = "us-west";
    o.region_known = true;
    o.provider_region = "US-CA-1";
    o.on_demand_price = 690000;  // $0.69/h
    o.boot = gpu::BootKind::kContainer;
    return std::vector<gpu::Offer>{o};
  }
  Result<gpu::Instance> Create(const gpu::LaunchRequest& r) override {
    ++creates;
    // What RunPod's pod listing says of a container: no offer, price or normalised names.
    gpu::Instance i;
    i.provider = gpu::kRunPod;
    i.id = "pod-" + std::to_string(creates);
    i.name = r.name;
    i.state = gpu::InstanceState::kPending;
    i.tags = r.tags;
    made.push_back(i);
    if (lose_answer) return gpu::MakeError(gpu::ErrorKind::kAmbiguous, "no answer");
    return i;
  }
  Result<gpu::Instance> Get(const std::string& id) override {
    for (const auto& i : made) {
      if (i.id == id) return i;
    }
    return gpu::MakeError(gpu::ErrorKind::kNotFound, "no pod " + id);
  }
  Result<std::vector<gpu::Instance>> List(const std::map<std::string, std::string>& tags) override {
    std::vector<gpu::Instance> out;
    for (const auto& i : made) {
      bool all = true;
      for (const auto& [k, v] : tags) {
        auto it = i.tags.find(k);
        all = all && it != i.tags.end() && it->second == v;
      }
      if (all) out.push_back(i);
    }
    return out;
  }
  Status Delete(const std::string&) override { return OkStatus(); }
};

struct Fixture {
  std::shared_ptr<ScriptedProvider> provider = std::make_shared<ScriptedProvider>();
  std::vector<json::object> records;  // status.machine patches, in order
  kube::Object runner = json::parse(R"({"apiVersion":"runners.hyperslice.dev/v1alpha1",
      "kind":"Runner","metadata":{"name":"gpu-a","uid":"uid-a","generation":1},
      "spec":{"controlNode":"cn","marketplace":{"gpuNodeClass":"market"}}})")
                            .as_object();
  RunnerSpec spec;

  Fixture() {
    spec.name = "gpu-a";
    spec.control_node = "cn";
    spec.placement = RunnerSpec::Placement::kMarketplace;
    spec.market.gpu_node_class = "market";
  }

  MarketRunnerProvisioner Make() {
    MarketProvisionerOptions o;
    o.classes = [p = provider](const std::string&, const kube::Object*) -> Result<MarketClass> {
      MarketClass c;
      c.providers.push_back({.client = p});
      return c;
    };
    o.agent_image = "registry.test/hyperslice@sha256:" + std::string(64, 'a');
    o.link_endpoint = "127.0.0.1:10251";
    o.ca_bundle_pem = "-----BEGIN CERTIFICATE-----\nX\n-----END CERTIFICATE-----\n";
    ProvisionStore store;
    store.record = [this](const std::string&, const json::object& patch) -> Status {
      records.push_back(patch);
      return OkStatus();
    };
    store.join_token = [](const std::string&) -> Result<std::optional<std::string>> {
      return std::optional<std::string>(std::string(32, 't'));
    };
    return MarketRunnerProvisioner(std::move(o), std::move(store));
  }
};

void ExpectBought(const json::object& machine) {
  EXPECT_EQ(StringField(machine, "provider"), gpu::kRunPod) << machine;
  EXPECT_EQ(StringField(machine, "offer"), "NVIDIA GeForce RTX 4090") << machine;
  EXPECT_EQ(StringField(machine, "gpuType"), "RTX4090") << machine;
  EXPECT_EQ(StringField(machine, "region"), "us-west") << machine;
  EXPECT_EQ(StringField(machine, "price"), "0.69") << machine;
  ASSERT_NE(machine.if_contains("spot"), nullptr) << machine;
  EXPECT_EQ(machine.at("spot"), false);
  // Absent in the status, null (dropped) in a record written through.
  const json::value* attempt = machine.if_contains("launchAttempt");
  EXPECT_TRUE(attempt == nullptr || attempt->is_null()) << machine;
}

TEST(MarketRunnerProvisioner, AMachineFoundAfterALostAnswerKeepsWhatWasBought) {
  Fixture f;
  f.provider->lose_answer = true;
  auto prov = f.Make();
  json::object status;
  auto first = prov.Reconcile(f.runner, f.spec, status);
  ASSERT_TRUE(first.ok()) << first.error().message;
  EXPECT_EQ(first->reason, "MachinePending");
  ASSERT_EQ(f.provider->creates, 1);

  // The next reconcile lists by the Runner's uid and adopts the machine instead of renting again.
  auto second = prov.Reconcile(f.runner, f.spec, status);
  ASSERT_TRUE(second.ok()) << second.error().message;
  EXPECT_EQ(f.provider->creates, 1) << "rented twice";
  const json::object* machine = ObjectField(status, "machine");
  ASSERT_NE(machine, nullptr) << status;
  EXPECT_EQ(StringField(*machine, "id"), "pod-1");
  ExpectBought(*machine);
  ASSERT_FALSE(f.records.empty());
  ExpectBought(f.records.back());  // written through as well
}

TEST(MarketRunnerProvisioner, AReconcileOnAStaleCopyKeepsWhatTheLaunchRecorded) {
  Fixture f;
  auto prov = f.Make();
  json::object status;
  auto launched = prov.Reconcile(f.runner, f.spec, status);
  ASSERT_TRUE(launched.ok()) << launched.error().message;
  ASSERT_EQ(f.provider->creates, 1);
  ExpectBought(status.at("machine").as_object());

  // A reconcile that read the Runner between the two records of the launch sees the attempt only.
  ASSERT_GE(f.records.size(), 2u);
  json::object stale{{"machine", f.records.front()}};
  ASSERT_NE(ObjectField(stale.at("machine").as_object(), "launchAttempt"), nullptr) << stale;
  auto again = prov.Reconcile(f.runner, f.spec, stale);
  ASSERT_TRUE(again.ok()) << again.error().message;
  EXPECT_EQ(f.provider->creates, 1) << "rented twice";
  const json::object& machine = stale.at("machine").as_object();
  EXPECT_EQ(StringField(machine, "id"), "pod-1");
  ExpectBought(machine);
  ExpectBought(f.records.back());
}

}  // namespace
}  // namespace hyperslice::runners::controlnode
