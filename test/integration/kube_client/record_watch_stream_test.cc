// Records a real watch response body from the apiserver for bench/watch_decode_bench.cc.
// Disabled by default; run it once to refresh bench/data/watch_stream_1mib.jsonl (one command):
//   HS_RECORD_WATCH_TO=bench/data/watch_stream_1mib.jsonl
//     build/test/integration/kube_client/kube_client_integration_test
//     --gtest_also_run_disabled_tests --gtest_filter='*RecordWatchStream*'
// The body is read with net::HttpClient::Stream (not the decoder), so the bytes are exactly what
// the apiserver wrote, cut after the last complete event line.
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <boost/json.hpp>

#include "src/kube/client.h"
#include "src/kube/internal/watch_decoder.h"
#include "src/net/http.h"
#include "test/testenv/testenv.h"

namespace hyperslice::kube {
namespace {

namespace json = boost::json;

TEST(RecordWatchStream, DISABLED_RecordWatchStreamForBenchmark) {
  const char* out_path = std::getenv("HS_RECORD_WATCH_TO");
  ASSERT_NE(out_path, nullptr) << "set HS_RECORD_WATCH_TO to the output file";
  constexpr size_t kTarget = size_t{1} << 20;
  auto client = testenv::AdminClient();
  ASSERT_NE(client, nullptr);
  std::string ns = testenv::TestNamespace();
  Config cfg = testenv::Cluster().AdminConfig();

  net::HttpClient::Options o;
  o.base_url = cfg.server;
  o.tls = cfg.tls;
  auto http = net::HttpClient::Create(o);
  ASSERT_TRUE(http.ok()) << http.error().ToString();
  net::Request req;
  req.target = resources::ConfigMaps().CollectionPath(ns) + "?watch=1&allowWatchBookmarks=true";
  req.headers.emplace_back("Accept", "application/json");
  auto stream = (*http)->Stream(req, std::chrono::seconds(60));
  ASSERT_TRUE(stream.ok()) << stream.error().ToString();
  ASSERT_EQ((*stream)->status(), 200);

  // Writer: ConfigMaps shaped like real ones (labels, annotations, a few data keys), created and
  // then updated, some deleted, until the recorded body passes 1 MiB.
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    const auto& cm = resources::ConfigMaps();
    for (int i = 0; !stop; ++i) {
      std::string name = "app-config-" + std::to_string(i % 200);
      if (i < 200) {
        json::object data;
        for (int k = 0; k < 4; ++k) {
          data["key-" + std::to_string(k)] = "value " + std::to_string(i * 7 + k) + " " +
                                             std::string(40 + (i * 13 + k) % 120, 'x');
        }
        Object obj{{"metadata",
                    json::object{{"name", name},
                                 {"labels", json::object{{"app.kubernetes.io/name", "demo"},
                                                         {"tier", i % 2 ? "web" : "worker"}}},
                                 {"annotations",
                                  json::object{{"hyperslice.dev/revision", std::to_string(i)}}}}},
                   {"data", data}};
        (void)client->Create(cm, ns, obj);
      } else if (i % 17 == 0) {
        (void)client->Delete(cm, ns, name);
      } else {
        (void)client->Patch(cm, ns, name, PatchType::kMerge,
                            R"({"data":{"key-0":"updated )" + std::to_string(i) + R"("}})");
      }
      if (i % 17 == 0 && i >= 200) {
        (void)client->Create(cm, ns,
                             Object{{"metadata", json::object{{"name", name}}},
                                    {"data", json::object{{"recreated", std::to_string(i)}}}});
      }
    }
  });
  std::string body;
  while (body.size() < kTarget) {
    auto chunk = (*stream)->Next();
    if (!chunk.ok() || chunk->empty()) break;
    body += *chunk;
  }
  stop = true;
  (*stream)->Cancel();
  writer.join();
  ASSERT_GE(body.size(), kTarget);
  body.resize(body.rfind('\n') + 1);

  // It must decode cleanly.
  WatchDecoder d;
  ASSERT_TRUE(d.Feed(body).ok());
  ASSERT_TRUE(d.Finish().ok());
  EXPECT_GT(d.events_decoded(), 500u);  // ~1.1 KiB per event
  std::ofstream(out_path, std::ios::binary) << body;
  std::printf("recorded %zu bytes, %llu events to %s\n", body.size(),
              static_cast<unsigned long long>(d.events_decoded()), out_path);  // NOLINT
}

}  // namespace
}  // namespace hyperslice::kube
