// The official runpod SDK (runpod-python, installed by scripts/gpu-clients.sh; its folder in
// $HYPERSLICE_GPU_CLIENTS) drives the RunPod simulator: GPU types with prices, create, get, list,
// terminate. sdk_flow.py runs one SDK step per process; this test checks the simulator's state
// between the steps.
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>

#include <gtest/gtest.h>

#include "test/integration/gpu_runpod/fixture.h"
#include "test/testenv/gpu_clients.h"

namespace hyperslice::gpu::runpod_test {
namespace {

namespace json = boost::json;

std::string Quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

struct Step {
  int exit_code = -1;
  std::string out;
  json::value json;
};

class RunPodSdk : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    python_ = testenv::GpuClient("runpod/bin/python", why);  // the runpod SDK's virtualenv
    if (python_.empty()) GTEST_SKIP() << why;
  }

  // Runs one step of sdk_flow.py against the simulator (stderr goes to the test log).
  Step Run(SimFixture& f, const std::vector<std::string>& args) {
    std::string cmd = "env RUNPOD_API_BASE_URL=" + Quote(f.sim->api_endpoint()) +
                      " RUNPOD_API_KEY=sim-key HOME=" + Quote(::testing::TempDir()) + " " +
                      Quote(python_) + " " + Quote(HS_RUNPOD_SDK_SCRIPT);
    for (const auto& a : args) cmd += " " + Quote(a);
    Step s;
    FILE* p = ::popen(cmd.c_str(), "r");
    if (!p) return s;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) s.out.append(buf, n);
    int status = ::pclose(p);
    s.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    boost::system::error_code ec;
    s.json = json::parse(s.out, ec);
    return s;
  }

  std::string python_;
};

TEST_F(RunPodSdk, ListsCreatesReadsAndTerminatesAPod) {
  SimFixture f;
  // GPU types with prices.
  auto gpus = Run(f, {"gpus"});
  ASSERT_EQ(gpus.exit_code, 0) << gpus.out;
  bool listed = false;
  for (const auto& g : gpus.json.at("gpus").as_array()) {
    if (g.at("id").as_string() == "NVIDIA GeForce RTX 4090") {
      listed = true;
      EXPECT_EQ(g.at("displayName").as_string(), "RTX 4090");
      EXPECT_EQ(g.at("memoryInGb").as_int64(), 24);
    }
  }
  EXPECT_TRUE(listed);
  const auto& gpu = gpus.json.at("gpu");
  EXPECT_EQ(gpu.at("id").as_string(), "NVIDIA GeForce RTX 4090");
  EXPECT_EQ(gpu.at("maxGpuCount").as_int64(), 2);
  EXPECT_EQ(gpu.at("securePrice").as_double(), 0.69);
  EXPECT_EQ(gpu.at("communityPrice").as_double(), 0.59);
  EXPECT_EQ(gpu.at("lowestPrice").at("uninterruptablePrice").as_double(), 0.59);
  EXPECT_EQ(gpu.at("lowestPrice").at("minimumBidPrice").as_double(), 0.29);
  EXPECT_EQ(f.Counter("gpuTypes"), 2);

  // Create: the SDK first checks the GPU type (get_gpu), then podFindAndDeployOnDemand.
  auto created = Run(f, {"create"});
  ASSERT_EQ(created.exit_code, 0) << created.out;
  std::string id(created.json.at("id").as_string());
  EXPECT_EQ(created.json.at("imageName").as_string(),
            "runpod/pytorch:2.1.0-py3.10-cuda11.8.0-devel-ubuntu22.04");
  EXPECT_EQ(created.json.at("env").at(0).as_string(), "HELLO=world");
  EXPECT_FALSE(created.json.at("machine").at("podHostId").as_string().empty());
  EXPECT_EQ(f.Counter("podFindAndDeployOnDemand"), 1);
  auto m = f.sim->market().Get(id);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->owner, "sim-account");
  EXPECT_EQ(m->name, "sdk-pod");
  EXPECT_FALSE(m->spot);
  EXPECT_EQ(m->listing.gpu_name, "NVIDIA GeForce RTX 4090");
  EXPECT_EQ(m->listing.region, "EU-RO-1");  // the cheapest in stock: dataCenterId was null
  EXPECT_EQ(m->payload.at("env").at("HELLO").as_string(), "world");
  EXPECT_EQ(m->payload.at("ports").as_string(), "22/tcp");
  EXPECT_EQ(m->payload.at("containerDiskInGb").as_int64(), 10);

  // Read it once the container runs.
  ASSERT_TRUE(
      Eventually([&] { return f.sim->market().Get(id)->state == sim::market::State::kRunning; }));
  auto got = Run(f, {"get", id});
  ASSERT_EQ(got.exit_code, 0) << got.out;
  EXPECT_EQ(got.json.at("id").as_string(), id);
  EXPECT_EQ(got.json.at("desiredStatus").as_string(), "RUNNING");
  EXPECT_EQ(got.json.at("machine").at("gpuDisplayName").as_string(), "RTX 4090");
  EXPECT_EQ(got.json.at("runtime").at("ports").at(0).at("isIpPublic").as_bool(), true);
  EXPECT_EQ(got.json.at("costPerHr").as_double(), 0.59);

  auto list = Run(f, {"list"});
  ASSERT_EQ(list.exit_code, 0) << list.out;
  ASSERT_EQ(list.json.as_array().size(), 1u);
  EXPECT_EQ(list.json.at(0).at("id").as_string(), id);
  EXPECT_EQ(list.json.at(0).at("podType").as_string(), "RESERVED");

  auto term = Run(f, {"terminate", id});
  ASSERT_EQ(term.exit_code, 0) << term.out;
  EXPECT_EQ(f.Counter("podTerminate"), 1);
  auto state = f.sim->market().Get(id)->state;
  EXPECT_TRUE(state == sim::market::State::kStopping || state == sim::market::State::kTerminated);
  ASSERT_TRUE(Eventually(
      [&] { return f.sim->market().Get(id)->state == sim::market::State::kTerminated; }));
  // Gone from RunPod's point of view: get_pod answers None, get_pods an empty list.
  auto gone = Run(f, {"get", id});
  ASSERT_EQ(gone.exit_code, 0) << gone.out;
  EXPECT_TRUE(gone.json.is_null()) << gone.out;
  auto empty = Run(f, {"list"});
  ASSERT_EQ(empty.exit_code, 0);
  EXPECT_TRUE(empty.json.as_array().empty());
}

TEST_F(RunPodSdk, BadKeyIsAnAuthenticationError) {
  SimFixture f;
  std::string cmd = "env RUNPOD_API_BASE_URL=" + Quote(f.sim->api_endpoint()) +
                    " RUNPOD_API_KEY=wrong HOME=" + Quote(::testing::TempDir()) + " " +
                    Quote(python_) + " " + Quote(HS_RUNPOD_SDK_SCRIPT) + " gpus 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int status = ::pclose(p);
  EXPECT_NE(WEXITSTATUS(status), 0);
  // runpod-python raises AuthenticationError for HTTP 401 (runpod/api/graphql.py).
  EXPECT_NE(out.find("AuthenticationError"), std::string::npos) << out;
}

}  // namespace
}  // namespace hyperslice::gpu::runpod_test
