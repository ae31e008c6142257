// Compute v1 resources on the simulator over real HTTP: create/get/list/delete of every resource
// type, asynchronous operations, GCE's error shapes, requestId idempotency, fingerprints, the
// capacity model (BULK all-or-nothing, INDIVIDUAL partial, reservations), faults and counters.
#include <set>

#include "test/integration/sim_gce/sim_fixture.h"

namespace hyperslice::sim::gce::testing {
namespace {

using ApiTest = SimTest;

TEST_F(ApiTest, InstanceTemplateLifecycleWithAsyncOperation) {
  Reply ins = Api("POST", "global/instanceTemplates", TemplateBody("tmpl-a", "ct6e-standard-4t"));
  ASSERT_EQ(ins.status, 200) << ins.raw;
  const auto& op = ins.body.as_object();
  EXPECT_EQ(op.at("kind"), "compute#operation");
  EXPECT_EQ(op.at("operationType"), "insert");
  EXPECT_NE(op.at("status"), "DONE");  // 60 ms latency: the insert answers before it is done
  EXPECT_TRUE(op.at("id").is_string());
  EXPECT_TRUE(op.at("targetId").is_string());
  EXPECT_TRUE(op.at("insertTime").is_string());
  EXPECT_NE(std::string(op.at("targetLink").as_string()).find("/global/instanceTemplates/tmpl-a"),
            std::string::npos);
  json::object done = WaitDone(ins.body);
  EXPECT_EQ(done.at("progress"), 100);
  EXPECT_TRUE(done.contains("endTime"));
  EXPECT_FALSE(done.contains("error"));

  // operations get returns the same, DONE operation.
  std::string self(done.at("selfLink").as_string());
  Reply get_op = Api("GET", "global/operations/" + std::string(done.at("name").as_string()));
  ASSERT_EQ(get_op.status, 200) << get_op.raw;
  EXPECT_EQ(get_op.body.at("status"), "DONE");

  Reply got = Api("GET", "global/instanceTemplates/tmpl-a");
  ASSERT_EQ(got.status, 200) << got.raw;
  EXPECT_EQ(got.body.at("kind"), "compute#instanceTemplate");
  EXPECT_EQ(got.body.at("id"), op.at("targetId"));
  EXPECT_EQ(got.body.at("properties").at("machineType"), "ct6e-standard-4t");
  EXPECT_TRUE(got.body.at("creationTimestamp").is_string());

  Reply list = Api("GET", "global/instanceTemplates");
  ASSERT_EQ(list.status, 200);
  EXPECT_EQ(list.body.at("kind"), "compute#instanceTemplateList");
  ASSERT_EQ(list.body.at("items").as_array().size(), 1u);

  Reply del = Api("DELETE", "global/instanceTemplates/tmpl-a");
  ASSERT_EQ(del.status, 200) << del.raw;
  EXPECT_EQ(del.body.at("operationType"), "delete");
  WaitDone(del.body);
  Reply gone = Api("GET", "global/instanceTemplates/tmpl-a");
  EXPECT_EQ(gone.status, 404);
  EXPECT_EQ(ErrorReason(gone), "notFound");
  EXPECT_EQ(gone.body.at("error").at("status"), "NOT_FOUND");
  EXPECT_EQ(gone.body.at("error").at("message"),
            "The resource 'projects/my-gcp-project/global/instanceTemplates/tmpl-a' was not found");
}

TEST_F(ApiTest, DuplicateInsertIsAlreadyExists) {
  MakeTemplate("dup", "e2-medium");
  Reply again = Api("POST", "global/instanceTemplates", TemplateBody("dup", "e2-medium"));
  EXPECT_EQ(again.status, 409);
  EXPECT_EQ(ErrorReason(again), "alreadyExists");
  EXPECT_EQ(again.body.at("error").at("status"), "ALREADY_EXISTS");
}

TEST_F(ApiTest, RetriedInsertWithSameRequestIdCreatesNothingNew) {
  const std::string rid = "3f2a8c1e-5b7d-4e9f-a0c1-2d3e4f5a6b7c";
  Reply first =
      Api("POST", "global/instanceTemplates?requestId=" + rid, TemplateBody("idem", "e2-medium"));
  ASSERT_EQ(first.status, 200) << first.raw;
  WaitDone(first.body);
  Reply second =
      Api("POST", "global/instanceTemplates?requestId=" + rid, TemplateBody("idem", "e2-medium"));
  ASSERT_EQ(second.status, 200) << second.raw;  // not 409: the original operation again
  EXPECT_EQ(second.body.at("name"), first.body.at("name"));
  EXPECT_EQ(second.body.at("id"), first.body.at("id"));
  EXPECT_EQ(second.body.at("status"), "DONE");
  Reply list = Api("GET", "global/instanceTemplates");
  EXPECT_EQ(list.body.at("items").as_array().size(), 1u);
  // A different requestId is a different request: now the name clashes.
  Reply third =
      Api("POST", "global/instanceTemplates?requestId=4f2a8c1e-5b7d-4e9f-a0c1-2d3e4f5a6b7c",
          TemplateBody("idem", "e2-medium"));
  EXPECT_EQ(third.status, 409);
  Reply counters = Control("GET", "/control/counters");
  EXPECT_EQ(counters.body.at("compute.instanceTemplates.insert"), 3);
  // MIG inserts are idempotent the same way: one group, one set of VMs.
  const std::string mig_rid = "7a2a8c1e-5b7d-4e9f-a0c1-2d3e4f5a6b7c";
  Reply m1 = Api("POST", Zonal("instanceGroupManagers?requestId=" + mig_rid),
                 MigBody("idem-mig", "idem", 2));
  ASSERT_EQ(m1.status, 200) << m1.raw;
  Reply m2 = Api("POST", Zonal("instanceGroupManagers?requestId=" + mig_rid),
                 MigBody("idem-mig", "idem", 2));
  ASSERT_EQ(m2.status, 200) << m2.raw;
  EXPECT_EQ(m1.body.at("name"), m2.body.at("name"));
  WaitDone(m2.body);
  ASSERT_TRUE(Eventually([&] { return Instances().size() == 2; }));
  EXPECT_EQ(Instances().size(), 2u);
}

TEST_F(ApiTest, MissingOrUnknownTokenIsUnauthenticated) {
  Reply none = ApiRaw("GET", "global/instanceTemplates", "", "");
  EXPECT_EQ(none.status, 401);
  EXPECT_EQ(ErrorReason(none), "authError");
  EXPECT_EQ(none.body.at("error").at("status"), "UNAUTHENTICATED");
  Reply wrong = ApiRaw("GET", "global/instanceTemplates", "", "not-a-token");
  EXPECT_EQ(wrong.status, 401);
  // A token from the control endpoint works.
  Reply tok = Control("POST", "/control/tokens");
  ASSERT_EQ(tok.status, 200);
  Reply ok = ApiRaw("GET", "global/instanceTemplates", "",
                    std::string(tok.body.at("access_token").as_string()));
  EXPECT_EQ(ok.status, 200) << ok.raw;
}

TEST_F(ApiTest, ResourcePolicyAndMigWithWorkloadPolicy) {
  Reply pol = Api("POST", "regions/us-central1/resourcePolicies",
                  json::object{{"name", "wp-4x4x4"},
                               {"workloadPolicy", json::object{{"type", "HIGH_THROUGHPUT"},
                                                               {"acceleratorTopology", "4x4x4"}}}});
  ASSERT_EQ(pol.status, 200) << pol.raw;
  EXPECT_NE(pol.body.at("region"), nullptr);
  WaitDone(pol.body);
  Reply got = Api("GET", "regions/us-central1/resourcePolicies/wp-4x4x4");
  ASSERT_EQ(got.status, 200) << got.raw;
  EXPECT_EQ(got.body.at("kind"), "compute#resourcePolicy");
  EXPECT_EQ(got.body.at("workloadPolicy").at("acceleratorTopology"), "4x4x4");
  EXPECT_EQ(Api("GET", "regions/us-central1/resourcePolicies").body.at("items").as_array().size(),
            1u);

  MakeTemplate("tpu-tmpl", "tpu7x-standard-4t");
  json::object mig = MigBody("slice", "tpu-tmpl", 2);
  mig["resourcePolicies"] = json::object{
      {"workloadPolicy", "projects/my-gcp-project/regions/us-central1/resourcePolicies/wp-4x4x4"}};
  Reply ins = Api("POST", Zonal("instanceGroupManagers"), mig);
  ASSERT_EQ(ins.status, 200) << ins.raw;
  EXPECT_NE(ins.body.at("zone"), nullptr);
  WaitDone(ins.body);

  // In use: neither the policy nor the template can go while the MIG exists.
  Reply del_pol = Api("DELETE", "regions/us-central1/resourcePolicies/wp-4x4x4");
  EXPECT_EQ(del_pol.status, 400);
  EXPECT_EQ(ErrorReason(del_pol), "resourceInUseByAnotherResource");
  Reply del_tmpl = Api("DELETE", "global/instanceTemplates/tpu-tmpl");
  EXPECT_EQ(del_tmpl.status, 400);
  EXPECT_EQ(ErrorReason(del_tmpl), "resourceInUseByAnotherResource");

  // Teardown in reverse order succeeds, and the MIG takes its VMs with it.
  ASSERT_TRUE(Eventually([&] { return Instances().size() == 2; }));
  Reply del_mig = Api("DELETE", Zonal("instanceGroupManagers/slice"));
  ASSERT_EQ(del_mig.status, 200) << del_mig.raw;
  WaitDone(del_mig.body);
  EXPECT_EQ(Instances().size(), 0u);
  EXPECT_EQ(Api("GET", Zonal("instanceGroupManagers/slice")).status, 404);
  WaitDone(Api("DELETE", "global/instanceTemplates/tpu-tmpl").body);
  WaitDone(Api("DELETE", "regions/us-central1/resourcePolicies/wp-4x4x4").body);
  EXPECT_EQ(Api("GET", "regions/us-central1/resourcePolicies/wp-4x4x4").status, 404);
}

TEST_F(ApiTest, InstancesBootThroughProvisioningStagingRunning) {
  Control("POST", "/control/latency", json::object{{"instanceBootMs", 400}});
  MakeTemplate("boot", "e2-standard-4");
  WaitDone(
      Api("POST", Zonal("instanceGroupManagers"), MigBody("boot", "boot", 1, "INDIVIDUAL")).body);
  std::vector<std::string> seen;
  ASSERT_TRUE(Eventually([&] {
    auto items = Instances();
    if (items.empty()) return false;
    std::string s(items[0].at("status").as_string());
    if (seen.empty() || seen.back() != s) seen.push_back(s);
    return s == "RUNNING";
  }));
  // Whatever was observed is in lifecycle order.
  std::vector<std::string> order = {"PROVISIONING", "STAGING", "RUNNING"};
  size_t pos = 0;
  for (const auto& s : seen) {
    auto it = std::find(order.begin() + pos, order.end(), s);
    ASSERT_NE(it, order.end()) << "status out of order: " << s;
    pos = it - order.begin();
  }
  auto inst = Instances()[0].as_object();
  std::string name(inst.at("name").as_string());
  EXPECT_EQ(name.rfind("boot-", 0), 0u);
  EXPECT_EQ(name.size(), std::string("boot-").size() + 4);
  EXPECT_EQ(inst.at("kind"), "compute#instance");
  EXPECT_TRUE(inst.at("id").is_string());
  EXPECT_EQ(inst.at("metadata").at("items").at(0).at("key"), "startup-script");
  Reply one = Api("GET", Zonal("instances/" + name));
  ASSERT_EQ(one.status, 200);
  EXPECT_EQ(one.body.at("labels").at("hyperslice-owner"), "test");
}

TEST_F(ApiTest, StaleFingerprintIsConditionNotMetAndFreshOneSucceeds) {
  MakeTemplate("fp", "e2-medium");
  WaitDone(Api("POST", Zonal("instanceGroupManagers"), MigBody("fp", "fp", 1)).body);
  ASSERT_TRUE(Eventually([&] { return Instances().size() == 1; }));
  std::string name(Instances()[0].at("name").as_string());
  Reply inst = Api("GET", Zonal("instances/" + name));
  std::string fp(inst.body.at("metadata").at("fingerprint").as_string());

  json::object md{
      {"fingerprint", "c3RhbGU="},
      {"items", json::array{json::object{{"key", "kubeadm-join-token"}, {"value", "x"}}}}};
  Reply stale = Api("POST", Zonal("instances/" + name + "/setMetadata"), md);
  EXPECT_EQ(stale.status, 412);
  EXPECT_EQ(ErrorReason(stale), "conditionNotMet");
  EXPECT_EQ(stale.body.at("error").at("status"), "FAILED_PRECONDITION");

  md["fingerprint"] = fp;
  Reply ok = Api("POST", Zonal("instances/" + name + "/setMetadata"), md);
  ASSERT_EQ(ok.status, 200) << ok.raw;
  EXPECT_EQ(ok.body.at("operationType"), "setMetadata");
  WaitDone(ok.body);
  Reply after = Api("GET", Zonal("instances/" + name));
  std::string fp2(after.body.at("metadata").at("fingerprint").as_string());
  EXPECT_NE(fp2, fp);
  EXPECT_EQ(after.body.at("metadata").at("items").at(0).at("value"), "x");
  // The old fingerprint is stale now.
  Reply again = Api("POST", Zonal("instances/" + name + "/setMetadata"), md);
  EXPECT_EQ(again.status, 412);
}

TEST_F(ApiTest, BulkStockoutCreatesNoInstanceThenWholeSliceAtOnce) {
  ASSERT_EQ(
      Control("POST", "/control/capacity",
              json::object{{"zone", kZone}, {"machineType", "tpu7x-standard-4t"}, {"instances", 0}})
          .status,
      200);
  MakeTemplate("bulk", "tpu7x-standard-4t");
  Reply ins = Api("POST", Zonal("instanceGroupManagers"), MigBody("bulk", "bulk", 4));
  ASSERT_EQ(ins.status, 200) << ins.raw;
  json::object done = WaitDone(ins.body);
  EXPECT_FALSE(done.contains("error"));  // the MIG exists; its VMs wait for capacity

  // Every managed instance reports the stockout, and no VM exists.
  ASSERT_TRUE(Eventually([&] {
    Reply mi = Api("POST", Zonal("instanceGroupManagers/bulk/listManagedInstances"));
    if (mi.status != 200 || !mi.body.as_object().contains("managedInstances")) return false;
    for (const auto& m : mi.body.at("managedInstances").as_array()) {
      if (!m.as_object().contains("lastAttempt")) return false;
    }
    return mi.body.at("managedInstances").as_array().size() == 4;
  }));
  Reply mi = Api("POST", Zonal("instanceGroupManagers/bulk/listManagedInstances"));
  for (const auto& m : mi.body.at("managedInstances").as_array()) {
    EXPECT_EQ(m.at("currentAction"), "CREATING");
    EXPECT_FALSE(m.as_object().contains("instanceStatus"));
    EXPECT_EQ(m.at("lastAttempt").at("errors").at("errors").at(0).at("code"),
              "ZONE_RESOURCE_POOL_EXHAUSTED");
  }
  EXPECT_EQ(Instances().size(), 0u);
  Reply errors = Api("GET", Zonal("instanceGroupManagers/bulk/listErrors"));
  ASSERT_EQ(errors.status, 200) << errors.raw;
  ASSERT_FALSE(errors.body.at("items").as_array().empty());
  const auto& e0 = errors.body.at("items").at(0);
  EXPECT_EQ(e0.at("error").at("code"), "ZONE_RESOURCE_POOL_EXHAUSTED");
  EXPECT_EQ(e0.at("instanceActionDetails").at("action"), "CREATING");
  EXPECT_TRUE(e0.at("timestamp").is_string());
  Reply mig = Api("GET", Zonal("instanceGroupManagers/bulk"));
  const auto& bulk = mig.body.at("status").at("bulkInstanceOperation");
  EXPECT_EQ(bulk.at("inProgress"), true);
  EXPECT_EQ(bulk.at("lastProgressCheck").at("error").at("errors").at(0).at("code"),
            "ZONE_RESOURCE_POOL_EXHAUSTED");
  EXPECT_EQ(mig.body.at("status").at("isStable"), false);
  EXPECT_EQ(mig.body.at("currentActions").at("creating"), 4);

  // Capacity for 3 of 4: still nothing (all or none), across several retries.
  Control("POST", "/control/capacity",
          json::object{{"zone", kZone}, {"machineType", "tpu7x-standard-4t"}, {"instances", 3}});
  std::string ts(bulk.at("lastProgressCheck").at("timestamp").as_string());
  int checks = 0;
  ASSERT_TRUE(Eventually([&] {
    Reply m = Api("GET", Zonal("instanceGroupManagers/bulk"));
    std::string now(m.body.at("status")
                        .at("bulkInstanceOperation")
                        .at("lastProgressCheck")
                        .at("timestamp")
                        .as_string());
    if (now != ts) {
      ts = now;
      ++checks;
    }
    return checks >= 3;
  }));
  EXPECT_EQ(Instances().size(), 0u);

  // Enough capacity: the whole slice appears at once; never a part of it.
  Control("POST", "/control/capacity",
          json::object{{"zone", kZone}, {"machineType", "tpu7x-standard-4t"}, {"instances", 4}});
  ASSERT_TRUE(Eventually([&] {
    size_t n = Instances().size();
    EXPECT_TRUE(n == 0 || n == 4) << "partial slice: " << n;
    return n == 4;
  }));
  ASSERT_TRUE(Eventually([&] {
    Reply m = Api("GET", Zonal("instanceGroupManagers/bulk"));
    return m.body.at("status").at("isStable") == true;
  }));
  Reply m = Api("GET", Zonal("instanceGroupManagers/bulk"));
  EXPECT_EQ(m.body.at("status").at("bulkInstanceOperation").at("inProgress"), false);
  EXPECT_FALSE(m.body.at("status")
                   .at("bulkInstanceOperation")
                   .at("lastProgressCheck")
                   .as_object()
                   .contains("error"));
  Reply mi2 = Api("POST", Zonal("instanceGroupManagers/bulk/listManagedInstances"));
  for (const auto& one : mi2.body.at("managedInstances").as_array()) {
    EXPECT_EQ(one.at("instanceStatus"), "RUNNING");
    EXPECT_EQ(one.at("currentAction"), "NONE");
  }
}

TEST_F(ApiTest, IndividualModeCreatesWhatFits) {
  Control("POST", "/control/capacity",
          json::object{{"zone", kZone}, {"machineType", "ct6e-standard-1t"}, {"instances", 2}});
  MakeTemplate("indiv", "ct6e-standard-1t");
  WaitDone(
      Api("POST", Zonal("instanceGroupManagers"), MigBody("indiv", "indiv", 3, "INDIVIDUAL")).body);
  ASSERT_TRUE(Eventually([&] { return Instances().size() == 2; }));
  ASSERT_TRUE(Eventually([&] {
    Reply mi = Api("POST", Zonal("instanceGroupManagers/indiv/listManagedInstances"));
    int failing = 0;
    for (const auto& m : mi.body.at("managedInstances").as_array()) {
      failing += m.as_object().contains("lastAttempt");
    }
    return failing == 1;
  }));
  EXPECT_EQ(Instances().size(), 2u);
  // Resize down to 2 frees nothing it needs; resize to 1 deletes a VM.
  Reply rs = Api("POST", Zonal("instanceGroupManagers/indiv/resize?size=1"));
  ASSERT_EQ(rs.status, 200) << rs.raw;
  EXPECT_EQ(rs.body.at("operationType"), "compute.instanceGroupManagers.resize");
  WaitDone(rs.body);
  ASSERT_TRUE(Eventually([&] { return Instances().size() == 1; }));
  EXPECT_EQ(Api("GET", Zonal("instanceGroupManagers/indiv")).body.at("targetSize"), 1);
}

TEST_F(ApiTest, ReservationBoundTemplateConsumesItsReservation) {
  ASSERT_EQ(Control("POST", "/control/reservations",
                    json::object{{"zone", kZone},
                                 {"name", "res-a"},
                                 {"machineType", "tpu7x-standard-4t"},
                                 {"count", 2}})
                .status,
            200);
  // The zone has no capacity outside the reservation.
  Control("POST", "/control/capacity",
          json::object{{"zone", kZone}, {"machineType", "tpu7x-standard-4t"}, {"instances", 0}});
  Reply res = Api("GET", Zonal("reservations/res-a"));
  ASSERT_EQ(res.status, 200) << res.raw;
  EXPECT_EQ(res.body.at("specificReservation").at("count"), "2");
  EXPECT_EQ(res.body.at("specificReservation").at("inUseCount"), "0");
  EXPECT_EQ(std::string(res.body.at("zone").as_string()),
            sim_->api_endpoint() + "projects/my-gcp-project/zones/" + kZone);
  MakeTemplate(
      "rb", "tpu7x-standard-4t",
      json::object{
          {"scheduling", json::object{{"provisioningModel", "RESERVATION_BOUND"}}},
          {"reservationAffinity", json::object{{"consumeReservationType", "SPECIFIC_RESERVATION"},
                                               {"key", "compute.googleapis.com/reservation-name"},
                                               {"values", json::array{"res-a"}}}}});
  WaitDone(Api("POST", Zonal("instanceGroupManagers"), MigBody("rb", "rb", 2)).body);
  ASSERT_TRUE(Eventually([&] { return Instances().size() == 2; }));
  Reply after = Api("GET", Zonal("reservations/res-a"));
  EXPECT_EQ(after.body.at("specificReservation").at("inUseCount"), "2");
  // A bigger slice than the reservation holds does not start.
  WaitDone(Api("POST", Zonal("instanceGroupManagers"), MigBody("rb2", "rb", 1)).body);
  ASSERT_TRUE(Eventually([&] {
    Reply mi = Api("POST", Zonal("instanceGroupManagers/rb2/listManagedInstances"));
    return mi.body.at("managedInstances").at(0).as_object().contains("lastAttempt");
  }));
  EXPECT_EQ(Instances().size(), 2u);
}

TEST_F(ApiTest, InjectedErrorsAndOperationFailures) {
  ASSERT_EQ(Control("POST", "/control/faults",
                    json::object{{"method", "compute.instanceTemplates.insert"},
                                 {"rate", 1.0},
                                 {"code", 503},
                                 {"count", 2}})
                .status,
            200);
  Reply a = Api("POST", "global/instanceTemplates", TemplateBody("flaky", "e2-medium"));
  EXPECT_EQ(a.status, 503);
  EXPECT_EQ(ErrorReason(a), "backendError");
  EXPECT_EQ(Api("POST", "global/instanceTemplates", TemplateBody("flaky", "e2-medium")).status,
            503);
  Reply c = Api("POST", "global/instanceTemplates", TemplateBody("flaky", "e2-medium"));
  EXPECT_EQ(c.status, 200) << c.raw;
  WaitDone(c.body);

  Control("POST", "/control/faults",
          json::object{{"method", "compute.instanceTemplates.get"}, {"code", 429}, {"count", 1}});
  Reply limited = Api("GET", "global/instanceTemplates/flaky");
  EXPECT_EQ(limited.status, 429);
  EXPECT_EQ(ErrorReason(limited), "rateLimitExceeded");
  EXPECT_EQ(Api("GET", "global/instanceTemplates/flaky").status, 200);

  Control("POST", "/control/operation-failures",
          json::object{{"method", "compute.instanceTemplates.insert"},
                       {"code", "QUOTA_EXCEEDED"},
                       {"message", "Quota 'INSTANCE_TEMPLATES' exceeded."}});
  Reply f = Api("POST", "global/instanceTemplates", TemplateBody("doomed", "e2-medium"));
  ASSERT_EQ(f.status, 200) << f.raw;
  json::object done = WaitDone(f.body);
  ASSERT_TRUE(done.contains("error")) << json::serialize(done);
  EXPECT_EQ(done.at("error").at("errors").at(0).at("code"), "QUOTA_EXCEEDED");
  EXPECT_EQ(Api("GET", "global/instanceTemplates/doomed").status, 404);

  Reply counters = Control("GET", "/control/counters");
  EXPECT_EQ(counters.body.at("compute.instanceTemplates.insert"), 4);
  EXPECT_EQ(counters.body.at("compute.instanceTemplates.get"), 3);  // flaky twice, doomed once
}

TEST_F(ApiTest, SeededErrorRateIsDeterministic) {
  auto run = [&] {
    Control("POST", "/control/seed", json::object{{"seed", 42}});
    Control("POST", "/control/faults",
            json::object{{"method", "compute.zones.get"}, {"rate", 0.2}, {"code", 503}});
    std::string pattern;
    for (int i = 0; i < 50; ++i) {
      pattern += Api("GET", "zones/us-central1-c").status == 200 ? '.' : 'x';
    }
    return pattern;
  };
  std::string p1 = run();
  std::string p2 = run();
  EXPECT_EQ(p1, p2);
  size_t failures = std::count(p1.begin(), p1.end(), 'x');
  EXPECT_GT(failures, 0u);
  EXPECT_LT(failures, 50u);
}

TEST_F(ApiTest, OperationWaitLongPollsUntilDone) {
  Control("POST", "/control/latency", json::object{{"operationMs", 500}});
  Reply ins = Api("POST", "global/instanceTemplates", TemplateBody("slow", "e2-medium"));
  ASSERT_EQ(ins.status, 200);
  EXPECT_EQ(ins.body.at("status"), "PENDING");
  std::string name(ins.body.at("name").as_string());
  // One wait call is enough: it blocks until the operation is DONE.
  Reply w = Api("POST", "global/operations/" + name + "/wait");
  ASSERT_EQ(w.status, 200) << w.raw;
  EXPECT_EQ(w.body.at("status"), "DONE");
  Reply missing = Api("POST", "global/operations/operation-nope/wait");
  EXPECT_EQ(missing.status, 404);
  EXPECT_EQ(ErrorReason(missing), "notFound");
}

TEST_F(ApiTest, ZonesRegionsSubnetworksAndReservationsReadable) {
  Reply zones = Api("GET", "zones");
  ASSERT_EQ(zones.status, 200);
  EXPECT_EQ(zones.body.at("items").as_array().size(), 4u);
  EXPECT_EQ(Api("GET", "zones/us-central1-c").body.at("status"), "UP");
  EXPECT_EQ(Api("GET", "zones/mars-1-a").status, 404);
  Reply region = Api("GET", "regions/us-central1");
  ASSERT_EQ(region.status, 200);
  EXPECT_EQ(region.body.at("zones").as_array().size(), 4u);
  Reply subnet = Api("GET", "regions/us-central1/subnetworks/default");
  ASSERT_EQ(subnet.status, 200) << subnet.raw;
  EXPECT_EQ(subnet.body.at("kind"), "compute#subnetwork");
  EXPECT_EQ(Api("GET", "regions/us-central1/subnetworks/nope").status, 404);
  EXPECT_EQ(Api("GET", Zonal("reservations/nope")).status, 404);
  Reply other = Do(*api_, "GET", "/compute/v1/projects/someone-else/zones", "",
                   {{"Authorization", std::string("Bearer ") + kToken}});
  EXPECT_EQ(other.status, 404);
}

TEST_F(ApiTest, KilledInstanceIsRecreatedByItsGroup) {
  MakeTemplate("heal", "e2-medium");
  WaitDone(Api("POST", Zonal("instanceGroupManagers"), MigBody("heal", "heal", 1)).body);
  ASSERT_TRUE(Eventually([&] {
    auto i = Instances();
    return i.size() == 1 && i[0].at("status") == "RUNNING";
  }));
  std::string name(Instances()[0].at("name").as_string());
  std::string id(Instances()[0].at("id").as_string());
  ASSERT_EQ(Control("POST", "/control/instances/kill",
                    json::object{{"zone", kZone}, {"name", name}, {"mode", "vanish"}})
                .status,
            200);
  ASSERT_TRUE(Eventually([&] {
    auto i = Instances();
    return i.size() == 1 && i[0].at("id") != json::value(id) && i[0].at("status") == "RUNNING";
  }));
  EXPECT_EQ(Instances()[0].at("name"), json::value(name));  // same name, new VM
  Control("POST", "/control/instances/kill", json::object{{"zone", kZone}, {"name", name}});
  EXPECT_EQ(Instances()[0].at("status"), "TERMINATED");
  Control("POST", "/control/instances/restore", json::object{{"zone", kZone}, {"name", name}});
  ASSERT_TRUE(Eventually([&] { return Instances()[0].at("status") == "RUNNING"; }));
}

TEST_F(ApiTest, ListFiltersAndPaging) {
  MakeTemplate("alpha-1", "e2-medium");
  MakeTemplate("alpha-2", "e2-medium");
  MakeTemplate("beta-1", "e2-small");
  auto names = [&](const std::string& query) {
    Reply r = Api("GET", "global/instanceTemplates?" + query);
    EXPECT_EQ(r.status, 200) << r.raw;
    std::vector<std::string> out;
    if (r.body.is_object() && r.body.as_object().contains("items")) {
      for (const auto& i : r.body.at("items").as_array())
        out.emplace_back(i.at("name").as_string());
    }
    return out;
  };
  EXPECT_EQ(names("filter=" + net::UrlEncode("name = \"beta-1\"")),
            std::vector<std::string>{"beta-1"});
  EXPECT_EQ(names("filter=" + net::UrlEncode("name = alpha-*")),
            (std::vector<std::string>{"alpha-1", "alpha-2"}));
  EXPECT_EQ(
      names("filter=" + net::UrlEncode("name != alpha-* AND properties.machineType = e2-small")),
      std::vector<std::string>{"beta-1"});
  EXPECT_EQ(names("filter=" +
                  net::UrlEncode("(properties.labels.hyperslice-owner = test) (name eq alpha-.)")),
            (std::vector<std::string>{"alpha-1", "alpha-2"}));
  Reply bad = Api("GET", "global/instanceTemplates?filter=" + net::UrlEncode("name ~ x"));
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(ErrorReason(bad), "invalid");
  // Paging: two pages of two and one.
  Reply p1 = Api("GET", "global/instanceTemplates?maxResults=2");
  ASSERT_EQ(p1.body.at("items").as_array().size(), 2u);
  std::string token(p1.body.at("nextPageToken").as_string());
  Reply p2 = Api("GET", "global/instanceTemplates?maxResults=2&pageToken=" + token);
  ASSERT_EQ(p2.body.at("items").as_array().size(), 1u);
  EXPECT_FALSE(p2.body.as_object().contains("nextPageToken"));
}

TEST_F(ApiTest, StockoutLatencyStateDumpAndReset) {
  MakeTemplate("so", "e2-medium");
  Control("POST", "/control/stockout", json::object{{"zone", kZone}, {"enabled", true}});
  WaitDone(Api("POST", Zonal("instanceGroupManagers"), MigBody("so", "so", 1, "INDIVIDUAL")).body);
  ASSERT_TRUE(Eventually([&] {
    Reply mi = Api("POST", Zonal("instanceGroupManagers/so/listManagedInstances"));
    return mi.body.at("managedInstances").at(0).as_object().contains("lastAttempt");
  }));
  EXPECT_EQ(Instances().size(), 0u);
  Control("POST", "/control/stockout", json::object{{"zone", kZone}, {"enabled", false}});
  ASSERT_TRUE(Eventually([&] { return Instances().size() == 1; }));

  // Per-method latency delays only that method's answers.
  ASSERT_EQ(Control("POST", "/control/latency",
                    json::object{{"method", "compute.zones.get"}, {"apiMs", 300}})
                .status,
            200);
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(Api("GET", "zones/us-central1-c").status, 200);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(300));

  Reply state = Control("GET", "/control/state");
  ASSERT_EQ(state.status, 200);
  const auto& inst = state.body.at("instances").at(0);
  EXPECT_EQ(std::string(inst.at("simMetadataHost").as_string()),
            sim_->metadata_host(kProject, kZone, std::string(inst.at("name").as_string())));
  EXPECT_EQ(state.body.at("instanceGroupManagers").as_array().size(), 1u);
  EXPECT_GE(state.body.at("counters").at("compute.zones.get").as_int64(), 1);

  ASSERT_EQ(Control("POST", "/control/reset").status, 200);
  EXPECT_EQ(Instances().size(), 0u);
  EXPECT_EQ(Api("GET", "global/instanceTemplates/so").status, 404);
  Reply counters = Control("GET", "/control/counters");
  EXPECT_EQ(counters.body.at("compute.instanceTemplates.get"), 1);  // the call just above
}

// instances.insert as GCE answers it: the checks before the answer (zone, name, machine type,
// accelerators, boot disk, an existing name), an asynchronous insert whose instance boots to
// RUNNING with a private 10.128.x.y address and serves its metadata, and a stockout that ends
// the operation with ZONE_RESOURCE_POOL_EXHAUSTED and creates nothing.
TEST_F(ApiTest, InstancesInsertValidatesBootsAndStocksOut) {
  auto body = [](const std::string& name, const std::string& mt) {
    return json::object{
        {"name", name},
        {"machineType", "zones/" + std::string(kZone) + "/machineTypes/" + mt},
        {"disks", json::array{json::object{
                      {"boot", true},
                      {"autoDelete", true},
                      {"initializeParams",
                       json::object{{"sourceImage",
                                     "projects/debian-cloud/global/images/family/debian-12"}}}}}},
        {"networkInterfaces", json::array{json::object{{"network", "global/networks/default"}}}},
        {"metadata", json::object{{"items", json::array{json::object{{"key", "hyperslice-x"},
                                                                     {"value", "42"}}}}}},
        {"labels", json::object{{"role", "runner"}}},
        {"scheduling", json::object{{"onHostMaintenance", "TERMINATE"}}},
    };
  };
  Reply unknown_zone = Api("POST", "zones/mars-central1-a/instances", body("vm", "n2-standard-4"));
  EXPECT_EQ(unknown_zone.status, 404) << unknown_zone.raw;
  EXPECT_EQ(ErrorReason(unknown_zone), "notFound");
  Reply bad_mt = Api("POST", Zonal("instances"), body("vm", "n2-imaginary"));
  EXPECT_EQ(bad_mt.status, 400) << bad_mt.raw;
  EXPECT_EQ(ErrorReason(bad_mt), "invalid");
  EXPECT_NE(bad_mt.raw.find("Machine type with name 'n2-imaginary' does not exist in zone"),
            std::string::npos)
      << bad_mt.raw;
  json::object bad_acc = body("vm", "a2-highgpu-1g");
  bad_acc["guestAccelerators"] = json::array{json::object{
      {"acceleratorType", "zones/" + std::string(kZone) + "/acceleratorTypes/warp-core"},
      {"acceleratorCount", 1}}};
  Reply acc = Api("POST", Zonal("instances"), bad_acc);
  EXPECT_EQ(acc.status, 400) << acc.raw;
  EXPECT_EQ(ErrorReason(acc), "invalid");
  json::object no_disk = body("vm", "n2-standard-4");
  no_disk.erase("disks");
  Reply disk = Api("POST", Zonal("instances"), no_disk);
  EXPECT_EQ(disk.status, 400) << disk.raw;
  EXPECT_NE(disk.raw.find("No disks are specified"), std::string::npos) << disk.raw;
  json::object unknown_field = body("vm", "n2-standard-4");
  unknown_field["flux"] = 1;
  EXPECT_EQ(Api("POST", Zonal("instances"), unknown_field).status, 400)
      << "checked against the proto";
  Reply bad_name = Api("POST", Zonal("instances"), body("VM_1", "n2-standard-4"));
  EXPECT_EQ(bad_name.status, 400) << bad_name.raw;
  EXPECT_TRUE(Instances().empty()) << "a refused insert creates nothing";

  Reply ins = Api("POST", Zonal("instances"), body("runner-vm", "n2-standard-4"));
  ASSERT_EQ(ins.status, 200) << ins.raw;
  EXPECT_EQ(ins.body.at("operationType"), "insert");
  EXPECT_NE(ins.body.at("status"), "DONE") << "an insert is asynchronous";
  json::object done = WaitDone(ins.body);
  EXPECT_FALSE(done.contains("error")) << json::serialize(done);
  ASSERT_TRUE(Eventually([&] {
    Reply g = Api("GET", Zonal("instances/runner-vm"));
    return g.status == 200 && g.body.at("status") == "RUNNING";
  }));
  Reply got = Api("GET", Zonal("instances/runner-vm"));
  const auto& inst = got.body.as_object();
  EXPECT_EQ(inst.at("id"), done.at("targetId"));
  EXPECT_TRUE(std::string(inst.at("machineType").as_string())
                  .ends_with("/zones/" + std::string(kZone) + "/machineTypes/n2-standard-4"));
  std::string ip(inst.at("networkInterfaces").as_array()[0].at("networkIP").as_string());
  EXPECT_EQ(ip.rfind("10.128.", 0), 0u) << ip;
  EXPECT_EQ(inst.at("labels").at("role"), "runner");
  EXPECT_EQ(inst.at("scheduling").at("onHostMaintenance"), "TERMINATE");
  Reply dup = Api("POST", Zonal("instances"), body("runner-vm", "n2-standard-4"));
  EXPECT_EQ(dup.status, 409) << dup.raw;
  EXPECT_EQ(ErrorReason(dup), "alreadyExists");
  // Its metadata is served to the VM as a MIG instance's is.
  net::Headers flavor{{"Metadata-Flavor", "Google"}};
  std::string host = sim_->metadata_host(kProject, kZone, "runner-vm");
  Reply md =
      Do(*metadata_, "GET",
         host.substr(host.find('/')) + "/computeMetadata/v1/instance/attributes/hyperslice-x", "",
         flavor);
  EXPECT_EQ(md.status, 200);
  EXPECT_EQ(md.raw, "42");

  // A stockout: the operation fails with GCE's code and no instance is left.
  Reply so = Control(
      "POST", "/control/stockout",
      json::object{{"zone", kZone}, {"machineType", "ct5lp-hightpu-4t"}, {"enabled", true}});
  ASSERT_EQ(so.status, 200) << so.raw;
  Reply out = Api("POST", Zonal("instances"), body("tpu-vm", "ct5lp-hightpu-4t"));
  ASSERT_EQ(out.status, 200) << out.raw;
  json::object failed = WaitDone(out.body);
  ASSERT_TRUE(failed.contains("error")) << json::serialize(failed);
  EXPECT_EQ(failed.at("error").at("errors").as_array()[0].at("code"),
            "ZONE_RESOURCE_POOL_EXHAUSTED");
  EXPECT_EQ(Api("GET", Zonal("instances/tpu-vm")).status, 404);
  EXPECT_EQ(Instances().size(), 1u);

  // A second VM gets an address of its own.
  Reply second = Api("POST", Zonal("instances"), body("runner-vm-2", "e2-medium"));
  ASSERT_EQ(second.status, 200) << second.raw;
  WaitDone(second.body);
  Reply g2 = Api("GET", Zonal("instances/runner-vm-2"));
  EXPECT_NE(g2.body.at("networkInterfaces").as_array()[0].at("networkIP"), json::value(ip));
}

}  // namespace
}  // namespace hyperslice::sim::gce::testing
