// The official Vast.ai CLI (vastai 1.9.1, installed by scripts/gpu-clients.sh into the folder
// HYPERSLICE_GPU_CLIENTS names) drives the simulator: search offers, create an instance on demand
// and interruptible, show it, list instances, destroy it. Its --raw JSON is parsed and the
// simulator's state checked after each step.
//
// vastai reaches beyond --url in three places (read in its 1.9.1 source): cli/util.py fetches
// /api/v0/gpu_names/unique/ and /api/v0/gpu_types/ from $VAST_URL (default the public console) at
// import time, and cli/selfupdate.py fetches a release manifest ($VASTAI_MANIFEST_URL) unless
// VASTAI_NO_UPDATE_CHECK is set or --raw is given. So VAST_URL and VASTAI_MANIFEST_URL point at
// the simulator, the update check is off, and HTTP(S)_PROXY names a loopback trap with only
// loopback exempt (NO_PROXY): a request to any other host goes to the trap (which counts it and
// refuses it) instead of leaving the machine, and each test ends by checking the trap saw nothing.
// The trap is proven to work by sending it one request for an outside host through the same
// environment. HOME and the XDG folders are a fresh temporary folder, so no cached catalog or key
// is used.
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <vector>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <thread>

#include "test/integration/gpu_vast/fixture.h"
#include "test/testenv/gpu_clients.h"
#include "test/testenv/shell.h"

namespace hyperslice::gpu::vast_testing {
namespace {

namespace fs = std::filesystem;

// A loopback TCP listener standing in for an HTTP proxy: it records the first line of every
// connection (what a client asks a proxy: "GET http://host/..." or "CONNECT host:443") and closes
// it, so whatever is sent through it goes nowhere.
class ProxyTrap {
 public:
  ProxyTrap() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd_ < 0 || bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        listen(fd_, 16) != 0 || getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      return;
    }
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { Run(); });
  }
  ~ProxyTrap() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    if (fd_ >= 0) close(fd_);
  }
  int port() const { return port_; }
  std::vector<std::string> seen() {
    std::lock_guard lock(mu_);
    return seen_;
  }

 private:
  void Run() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 20) <= 0) continue;
      int c = accept(fd_, nullptr, nullptr);
      if (c < 0) continue;
      std::string line;
      char ch = 0;
      pollfd q{c, POLLIN, 0};
      while (line.size() < 512 && poll(&q, 1, 2000) > 0 && read(c, &ch, 1) == 1 && ch != '\n') {
        if (ch != '\r') line.push_back(ch);
      }
      size_t http = line.rfind(" HTTP/");
      {
        std::lock_guard lock(mu_);  // recorded before the client can see the close
        seen_.push_back(http == std::string::npos ? line : line.substr(0, http));
      }
      close(c);
    }
  }

  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex mu_;
  std::vector<std::string> seen_;
};

using CliRun = testenv::ShellRun;

class VastCliTest : public VastSimTest {
 protected:
  void SetUp() override {
    std::string why;
    cli_ = testenv::GpuClient("vastai/bin/vastai", why);  // vastai 1.9.1
    if (cli_.empty()) GTEST_SKIP() << why;
    VastSimTest::SetUp();
    char tmpl[] = "/tmp/hs-vastai-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    trap_ = std::make_unique<ProxyTrap>();
    ASSERT_NE(trap_->port(), 0);
    proxy_ = "http://127.0.0.1:" + std::to_string(trap_->port());
  }
  void TearDown() override {
    if (trap_) {
      std::string seen;
      for (const auto& t : trap_->seen()) seen += "\n  " + t;
      EXPECT_EQ(trap_->seen().size(), expected_trapped_)
          << "requests for hosts other than --url:" << seen;
    }
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
    VastSimTest::TearDown();
  }

  std::string Env() {
    const std::string url = sim_->api_endpoint();
    return "env -u VAST_API_KEY HOME='" + dir_ + "' XDG_CONFIG_HOME='" + dir_ +
           "/config' XDG_CACHE_HOME='" + dir_ + "/cache' XDG_STATE_HOME='" + dir_ +
           "/state' XDG_DATA_HOME='" + dir_ + "/data' VAST_URL='" + url +
           "' VASTAI_MANIFEST_URL='" + url + "/cli/manifest.json' VASTAI_NO_UPDATE_CHECK=1 " +
           "HTTP_PROXY=" + proxy_ + " HTTPS_PROXY=" + proxy_ + " http_proxy=" + proxy_ +
           " https_proxy=" + proxy_ + " NO_PROXY=127.0.0.1,localhost no_proxy=127.0.0.1,localhost ";
  }

  CliRun Cli(const std::string& args) {
    const std::string url = sim_->api_endpoint();
    return testenv::ShellApart(Env() + "'" + cli_ + "' --url '" + url + "' --api-key " + kKey +
                                   " --raw " + args + " </dev/null",
                               dir_);
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

  std::string cli_, dir_, proxy_;
  std::unique_ptr<ProxyTrap> trap_;
  size_t expected_trapped_ = 0;
};

TEST_F(VastCliTest, TheTrapCatchesRequestsForOtherHosts) {
  // The CLI's own interpreter and requests library, asked for an outside URL with the CLI's
  // environment: the request ends at the loopback trap, never on the network.
  std::ofstream(dir_ + "/probe.py") << "import requests\n"
                                       "for url in ['http://vast.ai.invalid/probe',\n"
                                       "            'https://console.vast.ai.invalid/api/v0/']:\n"
                                       "  try:\n"
                                       "    requests.get(url, timeout=5)\n"
                                       "  except Exception as e:\n"
                                       "    print(type(e).__name__)\n";
  std::string python = fs::path(cli_).parent_path().string() + "/python";
  std::string cmd = Env() + "'" + python + "' '" + dir_ + "/probe.py' >'" + dir_ + "/out' 2>&1";
  expected_trapped_ = 2;
  EXPECT_EQ(std::system(cmd.c_str()), 0);
  auto seen = trap_->seen();
  std::ifstream printed(dir_ + "/out");
  ASSERT_EQ(seen.size(), 2u) << std::string((std::istreambuf_iterator<char>(printed)),
                                            std::istreambuf_iterator<char>());
  EXPECT_EQ(seen[0], "GET http://vast.ai.invalid/probe");
  EXPECT_EQ(seen[1], "CONNECT console.vast.ai.invalid:443");  // how https goes by a proxy
}

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
