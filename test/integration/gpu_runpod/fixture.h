// A RunPod simulator on loopback and a client pointed at it, for the gpu_runpod tests.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <boost/json.hpp>

#include "sim/runpod/simulator.h"
#include "src/gpu/providers.h"
#include "src/net/http.h"
#include "test/testenv/eventually.h"

namespace hyperslice::gpu::runpod_test {

struct SimFixture {
  explicit SimFixture(const std::function<void(sim::market::ServerOptions&)>& tune = nullptr) {
    sim::market::ServerOptions o;
    o.market.boot_delay = std::chrono::milliseconds(100);
    o.market.running_delay = std::chrono::milliseconds(100);
    o.market.terminate_delay = std::chrono::milliseconds(100);
    o.market.tick = std::chrono::milliseconds(10);
    if (tune) tune(o);
    auto s = sim::runpod::Start(o);
    EXPECT_TRUE(s.ok()) << (s.ok() ? "" : s.error().message);
    sim = std::move(*s);
    auto c = net::HttpClient::Create({.base_url = sim->control_endpoint()});
    EXPECT_TRUE(c.ok());
    control = *c;
    auto a = net::HttpClient::Create({.base_url = sim->api_endpoint()});
    EXPECT_TRUE(a.ok());
    api = *a;
  }

  std::unique_ptr<Provider> Client(const std::string& key = "sim-key") {
    ProviderConfig c;
    c.name = kRunPod;
    c.endpoint = sim->api_endpoint();
    c.credentials = StaticCredential(key);
    c.retry.initial_backoff = std::chrono::milliseconds(20);
    c.retry.max_backoff = std::chrono::milliseconds(100);
    c.requests_per_second = 1000;
    c.burst = 1000;
    c.seed = 7;
    auto p = NewProvider(c);
    EXPECT_TRUE(p.ok()) << (p.ok() ? "" : p.error().message);
    return std::move(*p);
  }

  // POST /control/<path> with a JSON body; the status.
  int Control(const std::string& path, const boost::json::object& body) {
    net::Request r;
    r.method = "POST";
    r.target = "/control/" + path;
    r.body = boost::json::serialize(body);
    auto res = control->Do(r);
    EXPECT_TRUE(res.ok());
    return res.ok() ? res->status : 0;
  }
  int64_t Counter(const std::string& method) {
    auto c = sim->market().Counters();
    auto it = c.find(method);
    return it == c.end() ? 0 : it->second;
  }
  // Raw POST /graphql (the wire shapes themselves).
  net::Response Graphql(const std::string& query, const std::string& key = "sim-key") {
    net::Request r;
    r.method = "POST";
    r.target = "/graphql";
    r.headers = {{"content-type", "application/json"}, {"authorization", "Bearer " + key}};
    r.body = boost::json::serialize(boost::json::object{{"query", query}});
    auto res = api->Do(r);
    EXPECT_TRUE(res.ok());
    return res.ok() ? *res : net::Response{};
  }

  std::unique_ptr<sim::market::MarketSimulator> sim;
  std::shared_ptr<net::HttpClient> control, api;
};

using testenv::Eventually;

}  // namespace hyperslice::gpu::runpod_test
