// TPUNodeGroup parsing and the child specs derived from it: what GCE will receive, field by field.
#include "src/tpu/internal/nodegroup_spec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "src/tpu/api.h"

namespace hyperslice::tpu::internal {
namespace {

namespace json = boost::json;
using ::testing::HasSubstr;

// Seed 000's example, variables substituted.
json::object SeedGroup() {
  return json::parse(R"({
    "apiVersion": "tpu.google.com/v1alpha1", "kind": "TPUNodeGroup",
    "metadata": {"name": "my-tpu-node-group", "namespace": "default",
                 "uid": "0b5e7c4a-1111-2222-3333-444455556666", "generation": 1},
    "spec": {
      "project": "my-gcp-project", "nodeLocation": "us-central1-c", "nodeCount": 2,
      "acceleratorConnectionMode": "STATIC", "topology": "2x2x2", "targetSizePolicyMode": "BULK",
      "instanceConfig": {
        "machineType": "tpu7x-standard-4t", "provisioningModel": "RESERVATION_BOUND",
        "reservation": "my-tpu-reservation",
        "image": "projects/ubuntu-os-accelerator-images/global/images/ubuntu-accel-2404-amd64-tpu-tpu7x-v20260320",
        "subnetwork": "projects/my-gcp-project/regions/us-central1/subnetworks/default",
        "bootDiskSizeGB": 100},
      "bootstrapKubernetes": {"version": "1.31", "controlPlaneIP": "10.128.0.2"}}})")
      .as_object();
}

json::object V6eGroup() {
  return json::parse(R"({
    "metadata": {"name": "v6e", "namespace": "team-a", "uid": "u-1"},
    "spec": {"project": "p1", "nodeLocation": "europe-west4-a", "nodeCount": 1, "topology": "2x2",
             "instanceConfig": {"machineType": "ct6e-standard-4t", "provisioningModel": "SPOT",
                                "diskType": "hyperdisk-balanced",
                                "networkTags": ["tpu", "ssh"],
                                "serviceAccounts": [{"email": "sa@p1.iam.gserviceaccount.com"}],
                                "metadata": {"team": "a"}}}})")
      .as_object();
}

std::string Item(const json::object& props, const std::string& key) {
  for (const auto& it : props.at("metadata").at("items").as_array()) {
    if (it.at("key").as_string() == key) return std::string(it.at("value").as_string());
  }
  return "<absent>";
}

TEST(NodeGroupSpec, ParsesTheSeedExample) {
  auto s = ParseNodeGroup(SeedGroup());
  ASSERT_TRUE(s.ok()) << s.error().ToString();
  EXPECT_EQ(s->region, "us-central1");
  EXPECT_EQ(s->slice.hosts, 2);
  EXPECT_EQ(s->slice.chips, 8);
  EXPECT_TRUE(s->MultiHost());
  EXPECT_TRUE(s->NeedsResourcePolicy());
  EXPECT_TRUE(s->BootstrapEnabled());
  EXPECT_EQ(s->instance_config->boot_disk_size_gb, 100);
}

TEST(NodeGroupSpec, SeedPolicyIsHighThroughputWithTheTopology) {
  auto s = ParseNodeGroup(SeedGroup()).value();
  json::object p = ResourcePolicySpec(s);
  EXPECT_EQ(p.at("project").as_string(), "my-gcp-project");
  EXPECT_EQ(p.at("region").as_string(), "us-central1");
  EXPECT_EQ(p.at("name").as_string(), GceName("my-tpu-node-group", kRolePolicy, s.uid));
  EXPECT_EQ(p.at("workloadPolicy"),
            (json::object{{"type", "HIGH_THROUGHPUT"}, {"acceleratorTopology", "2x2x2"}}));
}

TEST(NodeGroupSpec, SeedTemplateCarriesEveryInstanceConfigField) {
  auto s = ParseNodeGroup(SeedGroup()).value();
  auto t = InstanceTemplateSpec(s, "cluster-1");
  ASSERT_TRUE(t.ok()) << t.error().ToString();
  EXPECT_EQ(t->at("name").as_string(), GceName("my-tpu-node-group", kRoleTemplate, s.uid));
  const json::object& props = t->at("properties").as_object();
  EXPECT_EQ(props.at("machineType").as_string(), "tpu7x-standard-4t");
  const json::object& disk = props.at("disks").as_array()[0].as_object();
  EXPECT_EQ(disk.at("boot"), true);
  EXPECT_EQ(disk.at("autoDelete"), true);
  EXPECT_EQ(disk.at("initializeParams").at("sourceImage").as_string(),
            "projects/ubuntu-os-accelerator-images/global/images/"
            "ubuntu-accel-2404-amd64-tpu-tpu7x-v20260320");
  EXPECT_EQ(disk.at("initializeParams").at("diskSizeGb").as_string(), "100");
  EXPECT_FALSE(disk.at("initializeParams").as_object().contains("diskType"));
  EXPECT_EQ(props.at("networkInterfaces").as_array()[0].at("subnetwork").as_string(),
            "projects/my-gcp-project/regions/us-central1/subnetworks/default");
  EXPECT_EQ(props.at("scheduling").at("provisioningModel").as_string(), "RESERVATION_BOUND");
  EXPECT_EQ(props.at("scheduling").at("onHostMaintenance").as_string(), "TERMINATE");
  const json::object& ra = props.at("reservationAffinity").as_object();
  EXPECT_EQ(ra.at("consumeReservationType").as_string(), "SPECIFIC_RESERVATION");
  EXPECT_EQ(ra.at("key").as_string(), "compute.googleapis.com/reservation-name");
  EXPECT_EQ(ra.at("values"), json::array{"my-tpu-reservation"});
  EXPECT_EQ(props.at("labels").at(kGceLabelManaged).as_string(), "true");
  EXPECT_EQ(props.at("labels").at(kGceLabelCluster).as_string(), "cluster-1");
  EXPECT_EQ(props.at("labels").at(kGceLabelGroup).as_string(), "default-my-tpu-node-group");
  EXPECT_EQ(Item(props, kMetaKubeLabels),
            "cloud.google.com/gke-accelerator-count=4,cloud.google.com/gke-tpu-accelerator=tpu7x,"
            "cloud.google.com/gke-tpu-topology=2x2x2,"
            "cloud.google.com/tpu-node-group=default-my-tpu-node-group");
  EXPECT_EQ(Item(props, kMetaTopology), "2x2x2");
  EXPECT_NE(Item(props, kMetaStartupScript), "<absent>");
  EXPECT_EQ(Item(props, kMetaJoinToken), "<absent>");  // written per VM later, never here
}

TEST(NodeGroupSpec, SeedMigIsBulkWithThePolicyAttached) {
  auto s = ParseNodeGroup(SeedGroup()).value();
  json::object m = ManagedInstanceGroupSpec(s);
  EXPECT_EQ(m.at("zone").as_string(), "us-central1-c");
  EXPECT_EQ(m.at("targetSize"), 2);
  EXPECT_EQ(m.at("targetSizePolicy").at("mode").as_string(), "BULK");
  EXPECT_EQ(m.at("instanceTemplate").as_string(),
            "projects/my-gcp-project/global/instanceTemplates/" + TemplateGceName(s));
  EXPECT_EQ(m.at("resourcePolicies").at("workloadPolicy").as_string(),
            "projects/my-gcp-project/regions/us-central1/resourcePolicies/" + PolicyGceName(s));
  std::string base(m.at("baseInstanceName").as_string());
  EXPECT_LE(base.size(), 54u);
  EXPECT_EQ(base.rfind("my-tpu-node-group-vm-", 0), 0u) << base;
}

TEST(NodeGroupSpec, SingleHostV6eHasNoPolicyAndUserFieldsPassThrough) {
  auto s = ParseNodeGroup(V6eGroup());
  ASSERT_TRUE(s.ok()) << s.error().ToString();
  EXPECT_FALSE(s->NeedsResourcePolicy());
  EXPECT_FALSE(s->BootstrapEnabled());
  EXPECT_FALSE(ManagedInstanceGroupSpec(*s).contains("resourcePolicies"));
  auto props = InstanceProperties(*s, "c").value();
  EXPECT_FALSE(props.contains("reservationAffinity"));
  EXPECT_EQ(props.at("scheduling").at("provisioningModel").as_string(), "SPOT");
  EXPECT_EQ(props.at("disks").at(0).at("initializeParams").at("diskType").as_string(),
            "hyperdisk-balanced");
  EXPECT_EQ(props.at("tags").at("items"), (json::array{"tpu", "ssh"}));
  EXPECT_EQ(props.at("serviceAccounts").at(0).at("scopes"),
            json::array{"https://www.googleapis.com/auth/cloud-platform"});
  EXPECT_EQ(Item(props, "team"), "a");
  EXPECT_EQ(Item(props, kMetaStartupScript), "<absent>");
  EXPECT_THAT(Item(props, kMetaKubeLabels), HasSubstr("gke-tpu-accelerator=tpu-v6e-slice"));
  EXPECT_EQ(NodeLabels(*s).at(kLabelNodeGroup), "team-a-v6e");
}

TEST(NodeGroupSpec, TemplateUriSkipsOurTemplateAndBootstrap) {
  json::object g = SeedGroup();
  auto& spec = g["spec"].as_object();
  spec.erase("instanceConfig");
  spec["instanceTemplateURI"] = "projects/my-gcp-project/global/instanceTemplates/mine";
  auto s = ParseNodeGroup(g);
  ASSERT_TRUE(s.ok()) << s.error().ToString();
  EXPECT_FALSE(s->OwnsInstanceTemplate());
  EXPECT_FALSE(s->BootstrapEnabled());
  EXPECT_EQ(s->slice.machine_type.name, "tpu7x-standard-4t");
  EXPECT_EQ(ManagedInstanceGroupSpec(*s).at("instanceTemplate").as_string(),
            "projects/my-gcp-project/global/instanceTemplates/mine");
  EXPECT_FALSE(InstanceTemplateSpec(*s, "c").ok());
}

TEST(NodeGroupSpec, InvalidSpecsSayWhatToChange) {
  auto problem = [](const std::function<void(json::object&)>& edit) {
    json::object g = SeedGroup();
    edit(g["spec"].as_object());
    auto s = ParseNodeGroup(g);
    EXPECT_FALSE(s.ok());
    return s.ok() ? std::string() : s.error().message;
  };
  EXPECT_THAT(problem([](json::object& s) { s["topology"] = "2x2"; }),
              HasSubstr("spec.topology/spec.instanceConfig.machineType"));
  EXPECT_THAT(problem([](json::object& s) { s["nodeCount"] = 3; }), HasSubstr("needs nodeCount 2"));
  EXPECT_THAT(problem([](json::object& s) { s["targetSizePolicyMode"] = "INDIVIDUAL"; }),
              HasSubstr("set spec.targetSizePolicyMode to BULK"));
  EXPECT_THAT(problem([](json::object& s) {
                s["instanceTemplateURI"] = "projects/my-gcp-project/global/instanceTemplates/t";
              }),
              HasSubstr("set only one of spec.instanceConfig"));
  EXPECT_THAT(problem([](json::object& s) {
                s.erase("instanceConfig");
                s["instanceTemplateURI"] = "projects/other/global/instanceTemplates/t";
              }),
              HasSubstr("use a template from project my-gcp-project"));
  EXPECT_THAT(problem([](json::object& s) {
                s.erase("instanceConfig");
                s["instanceTemplateURI"] = "projects/my-gcp-project/global/images/t";
              }),
              HasSubstr("must name an instance template"));
  EXPECT_THAT(problem([](json::object& s) { s["nodeLocation"] = "us-central1"; }),
              HasSubstr("spec.nodeLocation must be a GCE zone"));
  EXPECT_THAT(problem([](json::object& s) {
                s["instanceConfig"].as_object()["metadata"] = json::object{{"startup-script", "x"}};
              }),
              HasSubstr("hyperslice manages that key"));
}

TEST(NodeGroupSpec, InstanceTemplateUriShapes) {
  EXPECT_TRUE(IsInstanceTemplateUri("projects/p/global/instanceTemplates/t-1"));
  EXPECT_TRUE(IsInstanceTemplateUri("global/instanceTemplates/t"));
  EXPECT_TRUE(IsInstanceTemplateUri("projects/p/regions/us-central1/instanceTemplates/t"));
  EXPECT_TRUE(IsInstanceTemplateUri(
      "https://compute.googleapis.com/compute/v1/projects/p/global/instanceTemplates/t"));
  EXPECT_FALSE(IsInstanceTemplateUri("t"));
  EXPECT_FALSE(IsInstanceTemplateUri("projects/p/global/instanceTemplates/"));
  EXPECT_FALSE(IsInstanceTemplateUri("projects/p/global/instanceTemplates/Bad_Name"));
  EXPECT_FALSE(IsInstanceTemplateUri("projects/p/global/instanceTemplates/t/extra"));
  EXPECT_EQ(ProjectOfTemplateUri("projects/p/global/instanceTemplates/t"), "p");
  EXPECT_EQ(ProjectOfTemplateUri("global/instanceTemplates/t"), "");
}

}  // namespace
}  // namespace hyperslice::tpu::internal
