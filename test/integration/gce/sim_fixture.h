// Shared set-up for the GCE client's integration tests: a real simulator on loopback (sim/gce),
// its control endpoint, and a Compute client pointed at it.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include "sim/gce/simulator.h"
#include "src/gce/compute.h"
#include "src/net/http.h"
#include "test/testenv/eventually.h"

namespace hyperslice::gce::testing {

inline constexpr char kProject[] = "my-gcp-project";
inline constexpr char kRegion[] = "us-central1";
inline constexpr char kZone[] = "us-central1-a";
inline constexpr char kMachineType[] = "tpu7x-standard-4t";

// The simulator's control endpoint (fault injection, capacity, counters), over HTTP.
class Control {
 public:
  explicit Control(const std::string& endpoint) {
    net::HttpClient::Options o;
    o.base_url = endpoint;
    http_ = net::HttpClient::Create(o).value();
  }
  boost::json::value Call(const std::string& method, const std::string& path,
                          const boost::json::object& body = {}) {
    net::Request req;
    req.method = method;
    req.target = path;
    if (method != "GET") {
      req.body = boost::json::serialize(body);
      req.headers = {{"Content-Type", "application/json"}};
    }
    auto resp = http_->Do(req);
    EXPECT_TRUE(resp.ok()) << resp.error().ToString();
    if (!resp.ok()) return nullptr;
    EXPECT_EQ(resp->status, 200) << method << " " << path << ": " << resp->body;
    boost::system::error_code ec;
    auto v = boost::json::parse(resp->body, ec);
    return ec ? boost::json::value(nullptr) : v;
  }
  // Calls the simulator received for a method ("compute.instanceTemplates.insert").
  int64_t Counter(const std::string& method) {
    auto c = Call("GET", "/control/counters");
    if (!c.is_object()) return -1;
    const auto* v = c.as_object().if_contains(method);
    return v == nullptr ? 0 : v->to_number<int64_t>();
  }
  std::string NewToken() {
    auto t = Call("POST", "/control/tokens", {{"ttlSeconds", 3600}});
    return std::string(t.at("access_token").as_string());
  }

 private:
  std::shared_ptr<net::HttpClient> http_;
};

using testenv::Eventually;  // polls a condition until it holds or the timeout passes

class SimTest : public ::testing::Test {
 protected:
  void SetUp() override {
    sim::gce::Options o;
    o.operation_latency = std::chrono::milliseconds(100);
    o.instance_boot_latency = std::chrono::milliseconds(100);
    o.mig_retry_interval = std::chrono::milliseconds(100);
    o.reservations.push_back({kProject, kZone, "tpu-reservation", kMachineType, 4});
    Customize(o);
    auto s = sim::gce::Simulator::Start(o);
    ASSERT_TRUE(s.ok()) << s.error().ToString();
    sim_ = std::move(s).value();
    control_ = std::make_unique<Control>(sim_->control_endpoint());
    compute_ = NewCompute(StaticTokenSource(control_->NewToken()));
  }
  void TearDown() override {
    compute_.reset();
    if (sim_) sim_->Stop();
  }
  virtual void Customize(sim::gce::Options&) {}

  // A client with backoff sleeps recorded (and shortened to 1 ms) so retries run fast.
  std::unique_ptr<Compute> NewCompute(std::shared_ptr<TokenSource> tokens,
                                      const std::function<void(ComputeOptions&)>& tweak = {}) {
    ComputeOptions o;
    o.endpoint = sim_->api_endpoint();
    o.tokens = std::move(tokens);
    o.retry.sleep = [this](std::chrono::milliseconds d) {
      sleeps_.push_back(d);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    };
    if (tweak) tweak(o);
    auto c = Compute::Create(o);
    EXPECT_TRUE(c.ok()) << c.error().ToString();
    return c.ok() ? std::move(c).value() : nullptr;
  }

  static boost::json::object TemplateBody(const std::string& name) {
    auto body = boost::json::parse(R"json({
      "description": "TPU slice template, hyperslice",
      "properties": {
        "machineType": "tpu7x-standard-4t",
        "labels": {"hyperslice-owner": "default.slice"},
        "disks": [{"boot": true, "autoDelete": true, "type": "PERSISTENT",
                   "initializeParams": {
                     "sourceImage": "projects/debian-cloud/global/images/family/debian-12",
                     "diskSizeGb": "100", "diskType": "hyperdisk-balanced"}}],
        "networkInterfaces": [{"network": "global/networks/default",
                               "subnetwork": "regions/us-central1/subnetworks/default"}],
        "scheduling": {"provisioningModel": "STANDARD", "onHostMaintenance": "TERMINATE",
                       "automaticRestart": true},
        "metadata": {"items": [{"key": "startup-script", "value": "#!/bin/bash\necho hello"}]},
        "serviceAccounts": [{"email": "default",
                             "scopes": ["https://www.googleapis.com/auth/cloud-platform"]}]
      }})json")
                    .as_object();
    body["name"] = name;
    return body;
  }

  static boost::json::object MigBody(const std::string& name, const std::string& template_link,
                                     const std::string& policy_link, int64_t size,
                                     const std::string& mode = "BULK") {
    boost::json::object body{{"name", name},
                             {"baseInstanceName", name},
                             {"instanceTemplate", template_link},
                             {"targetSize", size},
                             {"targetSizePolicy", boost::json::object{{"mode", mode}}}};
    if (!policy_link.empty()) {
      body["resourcePolicies"] = boost::json::object{{"workloadPolicy", policy_link}};
    }
    return body;
  }

  // Inserts and waits for an instance template (and a workload policy); returns their selfLinks.
  std::string MakeTemplate(const std::string& name) {
    auto op = compute_->InsertInstanceTemplate(kProject, TemplateBody(name));
    EXPECT_TRUE(op.ok()) << op.error().ToString();
    if (!op.ok()) return {};
    auto done = compute_->Wait(op->ref, std::chrono::seconds(30));
    EXPECT_TRUE(done.ok()) << done.error().ToString();
    return op->target_link;
  }
  std::string MakePolicy(const std::string& name, const std::string& topology = "2x2x2") {
    auto op = compute_->InsertResourcePolicy(kProject, kRegion,
                                             HighThroughputWorkloadPolicy(name, topology));
    EXPECT_TRUE(op.ok()) << op.error().ToString();
    if (!op.ok()) return {};
    auto done = compute_->Wait(op->ref, std::chrono::seconds(30));
    EXPECT_TRUE(done.ok()) << done.error().ToString();
    return op->target_link;
  }

  // One VM: a template and a one-instance MIG (INDIVIDUAL) on it; the instance's name once the
  // simulator lists it, "" (with a failure) when it does not.
  std::string OneVm() {
    const auto tmpl = MakeTemplate("slice-tmpl");
    auto op = compute_->InsertInstanceGroupManager(kProject, kZone,
                                                   MigBody("m", tmpl, "", 1, "INDIVIDUAL"));
    EXPECT_TRUE(op.ok()) << op.error().ToString();
    if (!op.ok() || !compute_->Wait(op->ref, std::chrono::seconds(30)).ok()) return {};
    std::string vm;
    EXPECT_TRUE(Eventually([&] {
      auto l = compute_->ListInstances(kProject, kZone, {});
      if (!l.ok() || l->empty()) return false;
      vm = std::string(l->front().at("name").as_string());
      return true;
    }));
    return vm;
  }

  std::unique_ptr<sim::gce::Simulator> sim_;
  std::unique_ptr<Control> control_;
  std::unique_ptr<Compute> compute_;
  std::vector<std::chrono::milliseconds> sleeps_;
};

}  // namespace hyperslice::gce::testing
