// A Vast.ai simulator on loopback with short lifecycles, a Vast client pointed at it, and raw HTTP
// helpers for the API and control endpoints.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <boost/json.hpp>

#include "sim/vast/simulator.h"
#include "src/gpu/providers.h"
#include "src/kube/metrics.h"
#include "src/net/http.h"

namespace hyperslice::gpu::vast_testing {

namespace json = boost::json;

inline constexpr char kKey[] = "sim-key";  // the market's default account key

class VastSimTest : public ::testing::Test {
 protected:
  void SetUp() override {
    sim::market::ServerOptions o;
    o.market.boot_delay = std::chrono::milliseconds(50);
    o.market.running_delay = std::chrono::milliseconds(50);
    o.market.terminate_delay = std::chrono::milliseconds(50);
    o.market.tick = std::chrono::milliseconds(10);
    Customize(o);
    auto s = sim::vast::Start(std::move(o));
    ASSERT_TRUE(s.ok()) << s.error().ToString();
    sim_ = std::move(*s);
    net::HttpClient::Options h;
    h.base_url = sim_->api_endpoint();
    api_ = *net::HttpClient::Create(h);
    h.base_url = sim_->control_endpoint();
    control_ = *net::HttpClient::Create(h);
    provider_ = NewClient(kKey);
  }
  void TearDown() override {
    if (sim_) sim_->Stop();
  }
  virtual void Customize(sim::market::ServerOptions&) {}

  std::unique_ptr<Provider> NewClient(const std::string& key) {
    ProviderConfig c;
    c.name = kVast;
    c.endpoint = sim_->api_endpoint();
    c.credentials = StaticCredential(key);
    c.requests_per_second = 1000;  // the simulator's own limits are what tests exercise
    c.burst = 1000;
    c.retry.initial_backoff = std::chrono::milliseconds(20);
    c.retry.max_backoff = std::chrono::milliseconds(100);
    c.metrics = &metrics_;
    c.seed = 7;
    auto p = NewProvider(c);
    EXPECT_TRUE(p.ok()) << p.error().ToString();
    return p.ok() ? std::move(*p) : nullptr;
  }

  // One raw API call with the given key ("" for none).
  net::Response Api(const std::string& method, const std::string& target,
                    const std::string& body = "", const std::string& key = kKey) {
    net::Request r;
    r.method = method;
    r.target = target;
    if (!key.empty()) r.headers.emplace_back("Authorization", "Bearer " + key);
    if (!body.empty()) {
      r.headers.emplace_back("Content-Type", "application/json");
      r.body = body;
    }
    auto res = api_->Do(r);
    EXPECT_TRUE(res.ok()) << (res.ok() ? "" : res.error().ToString());
    return res.ok() ? *res : net::Response{};
  }

  json::value Control(const std::string& method, const std::string& path,
                      const json::value& body = nullptr) {
    net::Request r;
    r.method = method;
    r.target = path;
    if (!body.is_null()) r.body = json::serialize(body);
    auto res = control_->Do(r);
    EXPECT_TRUE(res.ok() && res->status == 200)
        << method << " " << path << ": " << (res.ok() ? res->body : res.error().ToString());
    if (!res.ok()) return nullptr;
    boost::system::error_code ec;
    auto v = json::parse(res->body, ec);
    return ec ? json::value(nullptr) : v;
  }

  void Fault(const std::string& method, const std::string& kind, int count = 1) {
    Control("POST", "/control/faults",
            json::object{{"method", method}, {"kind", kind}, {"count", count}});
  }

  int64_t Counter(const std::string& method) {
    auto c = sim_->market().Counters();
    auto it = c.find(method);
    return it == c.end() ? 0 : it->second;
  }

  // Polls the client's Get until `want` or the deadline (the lifecycle takes ~100 ms).
  Result<Instance> WaitFor(const std::string& id, InstanceState want,
                           std::chrono::milliseconds deadline = std::chrono::seconds(10)) {
    auto until = std::chrono::steady_clock::now() + deadline;
    while (true) {
      auto got = provider_->Get(id);
      if (!got.ok() || got->state == want || std::chrono::steady_clock::now() > until) return got;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  // The listed offer with this Vast ask id.
  Offer OfferById(const std::string& id) {
    auto offers = provider_->ListOffers();
    EXPECT_TRUE(offers.ok()) << (offers.ok() ? "" : offers.error().ToString());
    if (offers.ok()) {
      for (auto& o : *offers) {
        if (o.id == id) return o;
      }
    }
    ADD_FAILURE() << "offer " << id << " not listed";
    return Offer{};
  }

  kube::metrics::Registry metrics_;
  std::unique_ptr<sim::market::MarketSimulator> sim_;
  std::shared_ptr<net::HttpClient> api_, control_;
  std::unique_ptr<Provider> provider_;
};

}  // namespace hyperslice::gpu::vast_testing
