// `hyperslice sim gce` as a process: flags for capacity, reservations, latencies and a static
// token file; the endpoints printed as JSON on stdout; the API, metadata and control listeners
// answering; SIGTERM ends it with exit status 0.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "test/integration/sim_gce/sim_fixture.h"
#include "test/testenv/piped_child.h"

namespace hyperslice::sim::gce::testing {
namespace {

TEST(SimRoleTest, ServesTheEndpointsItPrintsUntilSigterm) {
#ifndef HS_BINARY
  GTEST_SKIP() << "the hyperslice binary is not part of this build";
#else
  if (access(HS_BINARY, X_OK) != 0) GTEST_SKIP() << HS_BINARY << " is not built in this tree";
  char tmpl[] = "/tmp/hs-simrole-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  std::string dir = tmpl;
  std::ofstream(dir + "/token") << "role-token\n";
  const testenv::PipedChild child = testenv::SpawnPiped(
      {HS_BINARY, "--log-level=warn", "sim", "gce", "--project=proj-a", "--region=europe-west4",
       "--capacity=europe-west4-a/ct6e-standard-4t=0",
       "--reservation=europe-west4-a/res-1/ct6e-standard-4t=8", "--operation-latency-ms=0",
       "--boot-latency-ms=0", "--static-token-file", dir + "/token"});
  const pid_t pid = child.pid;
  ASSERT_GE(pid, 0);
  FILE* out = fdopen(child.out, "r");
  char line[4096] = {0};
  ASSERT_NE(fgets(line, sizeof line, out), nullptr) << "no endpoints printed";
  boost::system::error_code ec;
  json::value endpoints = json::parse(line, ec);
  ASSERT_FALSE(ec) << line;
  std::string api(endpoints.at("api").as_string());
  EXPECT_EQ(api.rfind("http://127.0.0.1:", 0), 0u) << api;
  EXPECT_NE(api.find("/compute/v1/"), std::string::npos);
  EXPECT_TRUE(endpoints.at("metadataHostTemplate").is_string());

  auto client = SimTest::NewClient(api.substr(0, api.find("/compute/")));
  Reply res = SimTest::Do(*client, "GET",
                          "/compute/v1/projects/proj-a/zones/europe-west4-a/reservations/res-1", "",
                          {{"Authorization", "Bearer role-token"}});
  EXPECT_EQ(res.status, 200) << res.raw;
  EXPECT_EQ(res.body.at("specificReservation").at("count"), "8");
  Reply zones = SimTest::Do(*client, "GET", "/compute/v1/projects/proj-a/zones", "",
                            {{"Authorization", "Bearer role-token"}});
  EXPECT_EQ(zones.status, 200);
  EXPECT_EQ(zones.body.at("items").as_array().size(), 4u);
  Reply denied = SimTest::Do(*client, "GET", "/compute/v1/projects/proj-a/zones");
  EXPECT_EQ(denied.status, 401);
  auto control = SimTest::NewClient(std::string(endpoints.at("control").as_string()));
  Reply state = SimTest::Do(*control, "GET", "/control/state");
  ASSERT_EQ(state.status, 200);
  EXPECT_EQ(state.body.at("capacity").at("europe-west4-a/ct6e-standard-4t"), 0);

  ASSERT_EQ(kill(pid, SIGTERM), 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  fclose(out);
  std::remove((dir + "/token").c_str());
  rmdir(dir.c_str());
#endif
}

}  // namespace
}  // namespace hyperslice::sim::gce::testing
