// The official Vast.ai CLI (vastai 1.9.1, installed by scripts/gpu-clients.sh into the folder
// HYPERSLICE_GPU_CLIENTS names) drives the simulator: search offers, create an instance on demand
// and interruptible, show it, list instances, destroy it. Its --raw JSON is parsed and the
// simulator's state checked after each step.
//
// vastai reaches beyond --url in three places (read in its 1.9.1 source): cli/util.py fetches
// /api/v0/gpu_names/unique/ and /api/v0/gpu_types/ from $VAST_URL (default the public console) at
// import time, and cli/selfupdate.py fetches a release manifest ($VASTAI_MANIFEST_URL) unless
// VASTAI_NO_UPDATE_CHECK is set or --raw is given. So VAST_URL and VASTAI_MANIFEST_URL point at
// the simulator, the update check is off, and HTTP(S)_PROXY names a closed loopback port with only
// loopback exempt (NO_PROXY): a request to any other host fails instead of leaving the machine.
// HOME and the XDG folders are a fresh temporary folder, so no cached catalog or key is used.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "test/integration/gpu_vast/fixture.h"

namespace hyperslice::gpu::vast_testing {
namespace {

namespace fs = std::filesystem;

struct CliRun {
  int exit_code = -1;
  std::string out, err;
};

class VastCliTest : public VastSimTest {
 protected:
  void SetUp() override {
    const char* clients = std::getenv("HYPERSLICE_GPU_CLIENTS");
    if (!clients || !*clients) {
      GTEST_SKIP() << "HYPERSLICE_GPU_CLIENTS is not set (scripts/test.sh sets it from "
                      "scripts/gpu-clients.sh, which installs vastai 1.9.1)";
    }
    cli_ = std::string(clients) + "/vastai/bin/vastai";
    if (!fs::exists(cli_)) GTEST_SKIP() << cli_ << " does not exist";
    VastSimTest::SetUp();
    char tmpl[] = "/tmp/hs-vastai-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
    VastSimTest::TearDown();
  }

  CliRun Cli(const std::string& args) {
    const std::string url = sim_->api_endpoint();
    std::string env = "env -u VAST_API_KEY HOME='" + dir_ + "' XDG_CONFIG_HOME='" + dir_ +
                      "/config' XDG_CACHE_HOME='" + dir_ + "/cache' XDG_STATE_HOME='" + dir_ +
                      "/state' XDG_DATA_HOME='" + dir_ + "/data' VAST_URL='" + url +
                      "' VASTAI_MANIFEST_URL='" + url +
                      "/cli/manifest.json' VASTAI_NO_UPDATE_CHECK=1 "
                      "HTTP_PROXY=http://127.0.0.1:9 HTTPS_PROXY=http://127.0.0.1:9 "
                      "http_proxy=http://127.0.0.1:9 https_proxy=http://127.0.0.1:9 "
                      "NO_PROXY=127.0.0.1,localhost no_proxy=127.0.0.1,localhost ";
    std::string cmd = env + "'" + cli_ + "' --url '" + url + "' --api-key " + kKey + " --raw " +
                      args + " </dev/null >'" + dir_ + "/out' 2>'" + dir_ + "/err'";
    int rc = std::system(cmd.c_str());
    CliRun r;
    r.exit_code = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
    auto slurp = [](const std::string& path) {
      std::ifstream in(path);
      return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    };
    r.out = slurp(dir_ + "/out");
    r.err = slurp(dir_ + "/err");
    return r;
  }

  json::value Json(const std::string& args) {
    CliRun r = Cli(args);
    EXPECT_EQ(r.exit_code, 0) << "vastai " << args << "\nstderr:\n"
                              << r.err << "\nstdout:\n"
                              << r.out;
    boost::system::error_code ec;
    json::value v = json::parse(r.out, ec);
    EXPECT_FALSE(ec) << "vastai " << args << " printed no JSON:\n" << r.out << "\n" << r.err;
    return ec ? json::value(nullptr) : v;
  }

  // Waits for the market to run the instance (a positive signal, polled).
  void WaitRunning(const std::string& id) {
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < until) {
      auto i = sim_->market().Get(id);
      if (i && i->state == sim::market::State::kRunning) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ADD_FAILURE() << "instance " << id << " never ran";
  }

  std::string cli_, dir_;
};

TEST_F(VastCliTest, SearchesCreatesShowsAndDestroys) {
  // search offers: the CLI's query language becomes the JSON filter the simulator evaluates.
  json::value offers = Json("search offers 'gpu_name=RTX_4090 num_gpus=1'");
  ASSERT_TRUE(offers.is_array()) << offers;
  ASSERT_EQ(offers.as_array().size(), 2u) << offers;  // California and Germany
  for (const auto& o : offers.as_array()) {
    EXPECT_EQ(o.at("gpu_name").as_string(), "RTX 4090");
    EXPECT_EQ(o.at("num_gpus").as_int64(), 1);
    EXPECT_TRUE(o.at("rentable").as_bool());
  }
  // Default order: score descending (reliability 0.9961 before 0.9902).
  EXPECT_EQ(offers.as_array()[0].at("id").as_int64(), 18420311);
  json::value big = Json("search offers 'gpu_ram>=40 geolocation in [US,CA] num_gpus<8' -o dph");
  ASSERT_TRUE(big.is_array()) << big;
  std::vector<int64_t> ids;
  for (const auto& o : big.as_array()) ids.push_back(o.at("id").as_int64());
  EXPECT_EQ(ids, (std::vector<int64_t>{18423006, 18424210})) << big;  // A100 80G, H100; by price
  // Interruptible pricing (-i: type bid) prices each offer at its minimum bid.
  json::value bids = Json("search offers -i 'gpu_name=RTX_4090 num_gpus=1'");
  ASSERT_TRUE(bids.is_array() && !bids.as_array().empty()) << bids;
  for (const auto& o : bids.as_array()) {
    EXPECT_DOUBLE_EQ(o.at("dph_total").as_double(), o.at("min_bid").as_double());
  }
  json::value none = Json("search offers 'gpu_name=RTX_4090 geolocation notin [US,DE,CA]'");
  ASSERT_TRUE(none.is_array());
  EXPECT_TRUE(none.as_array().empty()) << none;

  // create instance (on demand).
  json::value created = Json(
      "create instance 18420311 --image nvidia/cuda:12.4.1-base-ubuntu22.04 --disk 20 "
      "--label cli-test --env '-e HS_TEST=yes -p 8080:8080' --onstart-cmd 'echo started'");
  ASSERT_TRUE(created.is_object()) << created;
  EXPECT_TRUE(created.at("success").as_bool());
  std::string id = std::to_string(created.at("new_contract").as_int64());
  auto inst = sim_->market().Get(id);
  ASSERT_TRUE(inst.has_value());
  EXPECT_FALSE(inst->spot);
  EXPECT_EQ(inst->listing.id, "18420311");
  EXPECT_EQ(inst->payload.at("image").as_string(), "nvidia/cuda:12.4.1-base-ubuntu22.04");
  EXPECT_EQ(inst->payload.at("env").at("HS_TEST").as_string(), "yes");
  EXPECT_EQ(inst->payload.at("onstart").as_string(), "echo started");
  EXPECT_EQ(inst->payload.at("label").as_string(), "cli-test");
  EXPECT_EQ(inst->payload.at("disk").as_double(), 20.0);

  // show instance, once the market runs it.
  WaitRunning(id);
  json::value shown = Json("show instance " + id);
  ASSERT_TRUE(shown.is_object()) << shown;
  EXPECT_EQ(shown.at("id").as_int64(), created.at("new_contract").as_int64());
  EXPECT_EQ(shown.at("actual_status").as_string(), "running");
  EXPECT_EQ(shown.at("label").as_string(), "cli-test");
  EXPECT_EQ(shown.at("image_uuid").as_string(), "nvidia/cuda:12.4.1-base-ubuntu22.04");
  EXPECT_EQ(shown.at("extra_env").at("HS_TEST").as_string(), "yes");  // the CLI's dict form
  EXPECT_FALSE(shown.at("is_bid").as_bool());
  EXPECT_EQ(std::string(shown.at("public_ipaddr").as_string()).rfind("192.0.2.", 0), 0u);

  // create instance (interruptible, with a bid).
  json::value bid = Json("create instance 18422040 --image alpine:3.20 --bid_price 0.12");
  ASSERT_TRUE(bid.is_object()) << bid;
  std::string bid_id = std::to_string(bid.at("new_contract").as_int64());
  auto spot = sim_->market().Get(bid_id);
  ASSERT_TRUE(spot.has_value());
  EXPECT_TRUE(spot->spot);
  EXPECT_EQ(spot->price, 120000);

  // show instances: both.
  json::value all = Json("show instances");
  ASSERT_TRUE(all.is_array()) << all;
  ASSERT_EQ(all.as_array().size(), 2u) << all;
  EXPECT_EQ(std::to_string(all.as_array()[0].at("id").as_int64()), id);
  EXPECT_TRUE(all.as_array()[1].at("is_bid").as_bool());

  // destroy instance.
  CliRun destroyed = Cli("destroy instance " + id + " -y");
  EXPECT_EQ(destroyed.exit_code, 0) << destroyed.err;
  inst = sim_->market().Get(id);
  ASSERT_TRUE(inst.has_value());
  EXPECT_TRUE(inst->state == sim::market::State::kStopping ||
              inst->state == sim::market::State::kTerminated);
  json::value after = Json("show instance " + id);
  EXPECT_EQ(after, json::parse(R"({"instances":null})"));
  json::value left = Json("show instances");
  ASSERT_TRUE(left.is_array());
  EXPECT_EQ(left.as_array().size(), 1u);

  // Everything the CLI asked went to the simulator: its start-up catalog and role lookups too.
  EXPECT_GE(Counter("GET /api/v0/gpu_names/unique/"), 1);
  EXPECT_GE(Counter("GET /api/v0/users/current/"), 1);
}

TEST_F(VastCliTest, ErrorsReachTheCliAsVastWouldSendThem) {
  CliRun bad = Cli("create instance 18420311 --image alpine:3.20 --bid_price 0.01");
  EXPECT_NE(bad.err.find("below the minimum bid"), std::string::npos) << bad.err << bad.out;
  EXPECT_NE(bad.err.find("\"status_code\": 400"), std::string::npos) << bad.err;
  CliRun gone = Cli("create instance 12345 --image alpine:3.20");
  EXPECT_NE(gone.err.find("no_such_ask"), std::string::npos) << gone.err;
  EXPECT_TRUE(sim_->market().List("").empty());
}

}  // namespace
}  // namespace hyperslice::gpu::vast_testing
