// Application Default Credentials against the simulator: a service-account key exchanged for a
// token at the simulator's token endpoint (RS256 JWT), refreshed before expiry, and the per-VM
// metadata server's token; the API accepts what each yields.
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "src/base/fake_clock.h"
#include "src/net/pki.h"
#include "test/integration/gce/sim_fixture.h"

namespace hyperslice::gce::testing {
namespace {

using namespace std::chrono_literals;

using AuthSim = SimTest;

TEST_F(AuthSim, ServiceAccountKeyFileIsExchangedForATokenTheApiAccepts) {
  auto key = control_->Call("POST", "/control/service-account-keys",
                            {{"email", "hyperslice@my-gcp-project.iam.gserviceaccount.com"}});
  ASSERT_TRUE(key.is_object());
  auto path = std::filesystem::temp_directory_path() /
              ("hs-gce-sa-" + std::to_string(::getpid()) + ".json");
  std::ofstream(path) << boost::json::serialize(key);
  ::setenv("GOOGLE_APPLICATION_CREDENTIALS", path.c_str(), 1);
  FakeClock clock;
  TokenSourceOptions to;
  to.clock = &clock;
  auto tokens = DefaultTokenSource(to);
  ::unsetenv("GOOGLE_APPLICATION_CREDENTIALS");
  std::filesystem::remove(path);
  ASSERT_TRUE(tokens.ok()) << tokens.error().ToString();
  EXPECT_EQ((*tokens)->Describe(),
            "service-account:hyperslice@my-gcp-project.iam.gserviceaccount.com");

  auto compute = NewCompute(*tokens);
  ASSERT_TRUE(compute->ListInstanceTemplates(kProject, {}).ok());
  EXPECT_EQ(control_->Counter("oauth2.token"), 1);
  // Cached: more calls, no new token.
  clock.Advance(50min);
  ASSERT_TRUE(compute->GetSubnetwork(kProject, kRegion, "default").ok());
  EXPECT_EQ(control_->Counter("oauth2.token"), 1);
  // Five minutes before its expiry (3599 s) the token is replaced, and the new one works.
  clock.Advance(5min);
  ASSERT_TRUE(compute->GetSubnetwork(kProject, kRegion, "default").ok());
  EXPECT_EQ(control_->Counter("oauth2.token"), 2);
}

TEST_F(AuthSim, AKeyTheTokenEndpointDoesNotKnowIsRefused) {
  auto kp = net::pki::MakeRsaKey();
  ASSERT_TRUE(kp.ok());
  ServiceAccountKey key;
  key.client_email = "stranger@elsewhere.iam.gserviceaccount.com";
  key.private_key_id = "unknown";
  key.private_key = kp->key_pem;
  key.token_uri = sim_->token_endpoint();
  auto tokens = ServiceAccountTokenSource(key, {});
  ASSERT_TRUE(tokens.ok()) << tokens.error().ToString();
  auto compute = NewCompute(*tokens);
  auto got = compute->ListInstanceTemplates(kProject, {});
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.error().code, Error::Code::kUnauthorized);
  EXPECT_EQ(got.error().reason, "invalid_grant");
  EXPECT_EQ(control_->Counter("compute.instanceTemplates.list"), 0);  // never reached the API
}

TEST_F(AuthSim, MetadataServerTokenOfAVm) {
  const std::string vm = OneVm();
  ASSERT_FALSE(vm.empty());
  // What a workload on that VM would do: GCE_METADATA_HOST names its metadata server.
  ::setenv("GCE_METADATA_HOST", sim_->metadata_host(kProject, kZone, vm).c_str(), 1);
  auto tokens = MetadataTokenSource({});
  ::unsetenv("GCE_METADATA_HOST");
  ASSERT_TRUE(tokens.ok()) << tokens.error().ToString();
  EXPECT_EQ((*tokens)->Describe(), "metadata");
  auto compute = NewCompute(*tokens);
  auto got = compute->GetInstance(kProject, kZone, vm);
  ASSERT_TRUE(got.ok()) << got.error().ToString();
  EXPECT_EQ(got->at("name").as_string(), vm);
}

TEST_F(AuthSim, ARejectedTokenIsReplacedOnceThenReported) {
  auto compute = NewCompute(StaticTokenSource("not-a-token"));
  auto got = compute->ListInstanceTemplates(kProject, {});
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.error().code, Error::Code::kUnauthorized);
  EXPECT_EQ(got.error().http_status, 401);
  // One try, one re-authorised try (a static source cannot change its token): two calls.
  EXPECT_EQ(compute->counters().Get("instanceTemplates.list", "401"), 2u);
}

}  // namespace
}  // namespace hyperslice::gce::testing
