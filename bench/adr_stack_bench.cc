// The measurements behind docs/adr/0001-http-json-threading.md, in one run so ratios are fair on a
// shared machine:
//   * JSON: parse and serialize a 1 MiB Kubernetes list (ConfigMaps with labels and data) with
//     Boost.JSON (chosen) and nlohmann/json (the common alternative, header-only in Debian).
//   * HTTP: GET round trips with keep-alive on loopback against the project's Beast server, with
//     the project's Beast client (chosen) and with libcurl (the alternative for the client side).
// nlohmann and libcurl are linked into this benchmark only; product code uses neither.
#include <curl/curl.h>

#include <string>

#include <benchmark/benchmark.h>
#include <boost/json.hpp>
#include <nlohmann/json.hpp>

#include "src/net/http.h"
#include "src/net/server.h"

namespace {

std::string MakeList(size_t target_bytes) {
  boost::json::array items;
  std::string out;
  for (int i = 0; out.size() < target_bytes; ++i) {
    boost::json::object cm;
    cm["apiVersion"] = "v1";
    cm["kind"] = "ConfigMap";
    cm["metadata"] = {{"name", "cm-" + std::to_string(i)},
                      {"namespace", "default"},
                      {"uid", "6a1f0f4e-8d2b-4c7e-9a51-" + std::to_string(100000000000 + i)},
                      {"resourceVersion", std::to_string(1000 + i)},
                      {"labels", {{"app", "bench"}, {"index", std::to_string(i)}}}};
    cm["data"] = {{"key", std::string(200, 'x')}, {"n", std::to_string(i)}};
    items.push_back(std::move(cm));
    if (i % 64 == 0) {
      boost::json::object list{{"kind", "ConfigMapList"}, {"apiVersion", "v1"}, {"items", items}};
      out = boost::json::serialize(list);
    }
  }
  return out;
}

const std::string& List() {
  static const std::string s = MakeList(1 << 20);
  return s;
}

void BM_Json_Parse_Boost(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(boost::json::parse(List()));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * List().size()));
}
BENCHMARK(BM_Json_Parse_Boost);

void BM_Json_Parse_Nlohmann(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(nlohmann::json::parse(List()));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * List().size()));
}
BENCHMARK(BM_Json_Parse_Nlohmann);

void BM_Json_Serialize_Boost(benchmark::State& state) {
  auto v = boost::json::parse(List());
  for (auto _ : state) benchmark::DoNotOptimize(boost::json::serialize(v));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * List().size()));
}
BENCHMARK(BM_Json_Serialize_Boost);

void BM_Json_Serialize_Nlohmann(benchmark::State& state) {
  auto v = nlohmann::json::parse(List());
  for (auto _ : state) benchmark::DoNotOptimize(v.dump());
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * List().size()));
}
BENCHMARK(BM_Json_Serialize_Nlohmann);

hyperslice::net::HttpServer& Server() {
  static auto server = [] {
    hyperslice::net::HttpServer::Options o;
    o.threads = 1;
    auto s = hyperslice::net::HttpServer::Start(
        o,
        [](const hyperslice::net::ServerRequest&, std::shared_ptr<hyperslice::net::Responder> r) {
          r->Send(200, R"({"kind":"Status","status":"Success"})");
        });
    if (!s.ok()) std::abort();
    return std::move(s).value();
  }();
  return *server;
}

void BM_Http_Get_Beast(benchmark::State& state) {
  auto client = hyperslice::net::HttpClient::Create(
      {.base_url = "http://127.0.0.1:" + std::to_string(Server().port())});
  hyperslice::net::Request req;
  req.target = "/healthz";
  for (auto _ : state) {
    auto res = (*client)->Do(req);
    if (!res.ok() || res->status != 200) state.SkipWithError("request failed");
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}
BENCHMARK(BM_Http_Get_Beast)->UseRealTime();

size_t Sink(char*, size_t size, size_t n, void* out) {
  static_cast<std::string*>(out)->append(size * n, ' ');
  return size * n;
}

void BM_Http_Get_Curl(benchmark::State& state) {
  CURL* curl = curl_easy_init();
  std::string url = "http://127.0.0.1:" + std::to_string(Server().port()) + "/healthz";
  std::string body;
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, Sink);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &body);
  for (auto _ : state) {
    body.clear();
    if (curl_easy_perform(curl) != CURLE_OK) state.SkipWithError("request failed");
  }
  curl_easy_cleanup(curl);
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}
BENCHMARK(BM_Http_Get_Curl)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
