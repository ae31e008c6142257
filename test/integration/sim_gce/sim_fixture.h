// A GCE simulator on loopback plus HTTP helpers for the tests in this folder. Requests go through
// net::HttpClient exactly as any client's would; nothing reaches into the simulator's state.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <boost/json.hpp>

#include "sim/gce/simulator.h"
#include "src/net/http.h"
#include "test/testenv/eventually.h"

namespace hyperslice::sim::gce::testing {

namespace json = boost::json;

inline constexpr char kProject[] = "my-gcp-project";
inline constexpr char kZone[] = "us-central1-c";
inline constexpr char kRegion[] = "us-central1";
inline constexpr char kToken[] = "test-static-token";

struct Reply {
  int status = 0;
  json::value body;
  std::string raw;
  net::Headers headers;
  std::string Header(const std::string& name) const {
    for (const auto& [k, v] : headers) {
      if (k == name) return v;
    }
    return "";
  }
};

using testenv::Eventually;  // polls a condition until it holds or the timeout passes

class SimTest : public ::testing::Test {
 protected:
  virtual Options MakeOptions() {
    Options o;
    o.operation_latency = std::chrono::milliseconds(60);
    o.instance_boot_latency = std::chrono::milliseconds(60);
    o.mig_retry_interval = std::chrono::milliseconds(40);
    o.static_tokens = {kToken};
    return o;
  }

  void SetUp() override {
    auto sim = Simulator::Start(MakeOptions());
    ASSERT_TRUE(sim.ok()) << sim.error().ToString();
    sim_ = std::move(sim).value();
    api_ = NewClient(sim_->api_endpoint().substr(0, sim_->api_endpoint().find("/compute/")));
    control_ = NewClient(sim_->control_endpoint());
    metadata_ = NewClient(sim_->metadata_endpoint());
  }
  void TearDown() override {
    if (sim_) sim_->Stop();
  }

 public:
  static std::shared_ptr<net::HttpClient> NewClient(const std::string& base) {
    net::HttpClient::Options o;
    o.base_url = base;
    auto c = net::HttpClient::Create(o);
    EXPECT_TRUE(c.ok()) << c.error().ToString();
    return c.ok() ? *c : nullptr;
  }

  static Reply Do(net::HttpClient& client, const std::string& method, const std::string& target,
                  const std::string& body = "", net::Headers headers = {}) {
    net::Request req;
    req.method = method;
    req.target = target;
    req.body = body;
    req.headers = std::move(headers);
    if (!body.empty()) req.headers.emplace_back("Content-Type", "application/json");
    req.timeout = std::chrono::seconds(30);
    auto res = client.Do(req);
    Reply r;
    if (!res.ok()) {
      ADD_FAILURE() << method << " " << target << ": " << res.error().ToString();
      return r;
    }
    r.status = res->status;
    r.raw = res->body;
    r.headers = res->headers;
    boost::system::error_code ec;
    r.body = json::parse(res->body, ec);
    if (ec) r.body = nullptr;
    return r;
  }

 protected:
  // An API call under /compute/v1/projects/<project>/ with the test's token.
  Reply Api(const std::string& method, const std::string& rel, const json::value& body = nullptr) {
    return ApiRaw(method, rel, body.is_null() ? "" : json::serialize(body));
  }
  Reply ApiRaw(const std::string& method, const std::string& rel, const std::string& body,
               const std::string& token = kToken) {
    net::Headers h;
    if (!token.empty()) h.emplace_back("Authorization", "Bearer " + token);
    return Do(*api_, method, "/compute/v1/projects/" + std::string(kProject) + "/" + rel, body, h);
  }
  Reply Control(const std::string& method, const std::string& path,
                const json::value& body = nullptr) {
    return Do(*control_, method, path, body.is_null() ? "" : json::serialize(body));
  }

  // Waits for an operation with operations/{op}/wait (the long poll), until DONE.
  json::object WaitDone(const json::value& op) {
    std::string self(op.at("selfLink").as_string());
    std::string rel =
        self.substr(self.find("/projects/" + std::string(kProject) + "/") +
                    std::string("/projects/").size() + std::string(kProject).size() + 1);
    for (int i = 0; i < 50; ++i) {
      Reply r = Api("POST", rel + "/wait");
      EXPECT_EQ(r.status, 200) << r.raw;
      if (r.status != 200) return {};
      if (r.body.at("status") == "DONE") return r.body.as_object();
    }
    ADD_FAILURE() << "operation never finished: " << json::serialize(op);
    return {};
  }

  json::object TemplateBody(const std::string& name, const std::string& machine_type,
                            const json::object& extra_props = {}) {
    json::object props{
        {"machineType", machine_type},
        {"metadata",
         json::object{{"items", json::array{json::object{{"key", "startup-script"},
                                                         {"value", "#!/bin/bash\necho hi\n"}}}}}},
        {"disks", json::array{json::object{
                      {"boot", true},
                      {"autoDelete", true},
                      {"initializeParams",
                       json::object{{"diskSizeGb", "100"},
                                    {"sourceImage",
                                     "projects/debian-cloud/global/images/family/debian-12"}}}}}},
        {"networkInterfaces",
         json::array{json::object{{"subnetwork", "regions/us-central1/subnetworks/default"}}}},
        {"labels", json::object{{"hyperslice-owner", "test"}}},
    };
    for (auto& [k, v] : extra_props) props[k] = v;
    return json::object{{"name", name}, {"properties", props}};
  }

  // Inserts a template and waits for it.
  void MakeTemplate(const std::string& name, const std::string& machine_type,
                    const json::object& extra_props = {}) {
    Reply r =
        Api("POST", "global/instanceTemplates", TemplateBody(name, machine_type, extra_props));
    ASSERT_EQ(r.status, 200) << r.raw;
    json::object done = WaitDone(r.body);
    ASSERT_FALSE(done.contains("error")) << json::serialize(done);
  }

  json::object MigBody(const std::string& name, const std::string& tmpl, int64_t size,
                       const std::string& mode = "BULK") {
    return json::object{
        {"name", name},
        {"baseInstanceName", name},
        {"instanceTemplate",
         "projects/" + std::string(kProject) + "/global/instanceTemplates/" + tmpl},
        {"targetSize", size},
        {"targetSizePolicy", json::object{{"mode", mode}}},
    };
  }

  std::string Zonal(const std::string& rel) { return "zones/" + std::string(kZone) + "/" + rel; }

  json::array Instances() {
    Reply r = Api("GET", Zonal("instances"));
    EXPECT_EQ(r.status, 200) << r.raw;
    if (r.status != 200 || !r.body.as_object().contains("items")) return {};
    return r.body.at("items").as_array();
  }

  std::unique_ptr<Simulator> sim_;
  std::shared_ptr<net::HttpClient> api_, control_, metadata_;
};

// Checks GCE's error shape and returns errors[0].reason.
inline std::string ErrorReason(const Reply& r) {
  EXPECT_TRUE(r.body.is_object()) << r.raw;
  if (!r.body.is_object() || !r.body.as_object().contains("error")) return "<no error object>";
  const auto& e = r.body.at("error").as_object();
  EXPECT_EQ(e.at("code").as_int64(), r.status) << r.raw;
  EXPECT_TRUE(e.at("message").is_string()) << r.raw;
  EXPECT_TRUE(e.at("status").is_string()) << r.raw;
  const auto& errors = e.at("errors").as_array();
  EXPECT_FALSE(errors.empty()) << r.raw;
  if (errors.empty()) return "";
  EXPECT_EQ(errors[0].at("domain"), "global") << r.raw;
  EXPECT_EQ(errors[0].at("message"), e.at("message")) << r.raw;
  return std::string(errors[0].at("reason").as_string());
}

}  // namespace hyperslice::sim::gce::testing
