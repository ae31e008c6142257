// EnsureDevicePluginDaemonSet against the real apiserver: the object passes server-side
// validation, applying again changes nothing, deletion is idempotent, a missing namespace is a
// clear error.
#include "src/tpu/internal/device_plugin.h"

#include <gtest/gtest.h>
#include <boost/json.hpp>

#include "src/kube/client.h"
#include "test/testenv/testenv.h"

namespace hyperslice::tpu::testing {
namespace {

namespace json = boost::json;

TEST(DevicePluginDaemonSetIntegration, CreatedWhenNeededAndDeletedWhenNot) {
  auto client = testenv::AdminClient();
  const std::string ns = testenv::TestNamespace();
  const auto& ds = kube::resources::DaemonSets();

  auto st = internal::EnsureDevicePluginDaemonSet(*client, ns, "hyperslice:test", true);
  ASSERT_TRUE(st.ok()) << st.error().ToString();
  auto got = client->Get(ds, ns, internal::kDevicePluginDaemonSetName);
  ASSERT_TRUE(got.ok()) << got.error().ToString();
  const auto& pod = got->at("spec").at("template").at("spec");
  EXPECT_EQ(pod.at("containers").at(0).at("image"), "hyperslice:test");
  EXPECT_EQ(pod.at("tolerations").at(0).at("key"), "google.com/tpu");
  EXPECT_EQ(pod.at("affinity")
                .at("nodeAffinity")
                .at("requiredDuringSchedulingIgnoredDuringExecution")
                .at("nodeSelectorTerms")
                .at(0)
                .at("matchExpressions")
                .at(0)
                .at("key"),
            "cloud.google.com/gke-tpu-accelerator");
  // The apiserver defaulted it (a real apps/v1 object), e.g. the pod's restart policy.
  EXPECT_EQ(pod.at("restartPolicy"), "Always");
  const auto rv = got->at("metadata").at("resourceVersion");

  // Applying the same object again is a no-op; a new image is a change.
  ASSERT_TRUE(internal::EnsureDevicePluginDaemonSet(*client, ns, "hyperslice:test", true).ok());
  auto again = client->Get(ds, ns, internal::kDevicePluginDaemonSetName);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->at("metadata").at("resourceVersion"), rv);
  ASSERT_TRUE(internal::EnsureDevicePluginDaemonSet(*client, ns, "hyperslice:v2", true).ok());
  auto updated = client->Get(ds, ns, internal::kDevicePluginDaemonSetName);
  ASSERT_TRUE(updated.ok());
  EXPECT_EQ(updated->at("spec").at("template").at("spec").at("containers").at(0).at("image"),
            "hyperslice:v2");

  ASSERT_TRUE(internal::EnsureDevicePluginDaemonSet(*client, ns, "hyperslice:v2", false).ok());
  auto gone = client->Get(ds, ns, internal::kDevicePluginDaemonSetName);
  // Background deletion: the object is gone or carries a deletionTimestamp (no GC finalizer
  // without kube-controller-manager, so it goes at once).
  ASSERT_FALSE(gone.ok());
  EXPECT_EQ(gone.error().code, Error::Code::kNotFound);
  EXPECT_TRUE(internal::EnsureDevicePluginDaemonSet(*client, ns, "hyperslice:v2", false).ok());
}

TEST(DevicePluginDaemonSetIntegration, MissingNamespaceIsAClearError) {
  auto client = testenv::AdminClient();
  auto st = internal::EnsureDevicePluginDaemonSet(*client, "no-such-namespace-hs", "x", true);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code, Error::Code::kNotFound);
  EXPECT_NE(st.error().message.find("namespace no-such-namespace-hs"), std::string::npos)
      << st.error().message;
}

}  // namespace
}  // namespace hyperslice::tpu::testing
