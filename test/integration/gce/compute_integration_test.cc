// The Compute client against the GCE simulator over real HTTP: every resource type's
// create/get/list/delete with operations waited to DONE, fingerprints, idempotent retries,
// injected faults, and BULK stockouts.
#include <set>

#include "test/integration/gce/sim_fixture.h"

namespace hyperslice::gce::testing {
namespace {

using namespace std::chrono_literals;
using boost::json::object;

std::string Str(const object& o, std::string_view k) {
  const auto* v = o.if_contains(k);
  return v != nullptr && v->is_string() ? std::string(v->as_string()) : std::string();
}

std::set<std::string> Names(const std::vector<object>& items) {
  std::set<std::string> out;
  for (const auto& i : items) out.insert(Str(i, "name"));
  return out;
}

using ComputeSim = SimTest;

TEST_F(ComputeSim, ResourcePolicyCreateGetListDelete) {
  auto op = compute_->InsertResourcePolicy(
      kProject, kRegion,
      HighThroughputWorkloadPolicy("slice-policy", "2x2x2", "owned by default/slice"));
  ASSERT_TRUE(op.ok()) << op.error().ToString();
  EXPECT_EQ(op->ref.scope, Scope::kRegion);
  EXPECT_EQ(op->ref.location, kRegion);
  auto done = compute_->Wait(op->ref, 30s);
  ASSERT_TRUE(done.ok()) << done.error().ToString();
  EXPECT_EQ(done->status, "DONE");

  auto got = compute_->GetResourcePolicy(kProject, kRegion, "slice-policy");
  ASSERT_TRUE(got.ok()) << got.error().ToString();
  EXPECT_EQ(got->at("workloadPolicy").at("type"), "HIGH_THROUGHPUT");
  EXPECT_EQ(got->at("workloadPolicy").at("acceleratorTopology"), "2x2x2");
  EXPECT_EQ(Str(*got, "selfLink"), op->target_link);

  ASSERT_TRUE(compute_
                  ->Wait(compute_
                             ->InsertResourcePolicy(kProject, kRegion,
                                                    HighThroughputWorkloadPolicy("p2", "2x2x4"))
                             ->ref,
                         30s)
                  .ok());
  ListOptions one_per_page;
  one_per_page.page_size = 1;  // two pages: nextPageToken is followed
  auto list = compute_->ListResourcePolicies(kProject, kRegion, one_per_page);
  ASSERT_TRUE(list.ok()) << list.error().ToString();
  EXPECT_EQ(Names(*list), (std::set<std::string>{"slice-policy", "p2"}));
  EXPECT_EQ(control_->Counter("compute.resourcePolicies.list"), 2);

  auto again = compute_->InsertResourcePolicy(
      kProject, kRegion, HighThroughputWorkloadPolicy("slice-policy", "2x2x2"));
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error().code, Error::Code::kAlreadyExists);
  EXPECT_EQ(again.error().reason, "alreadyExists");
  EXPECT_EQ(again.error().http_status, 409);

  auto del = compute_->DeleteResourcePolicy(kProject, kRegion, "slice-policy");
  ASSERT_TRUE(del.ok()) << del.error().ToString();
  ASSERT_TRUE(compute_->Wait(del->ref, 30s).ok());
  auto gone = compute_->GetResourcePolicy(kProject, kRegion, "slice-policy");
  ASSERT_FALSE(gone.ok());
  EXPECT_EQ(gone.error().code, Error::Code::kNotFound);
  EXPECT_EQ(gone.error().reason, "notFound");
}

TEST_F(ComputeSim, InstanceTemplateCreateGetListDelete) {
  auto op = compute_->InsertInstanceTemplate(kProject, TemplateBody("slice-tmpl"));
  ASSERT_TRUE(op.ok()) << op.error().ToString();
  EXPECT_EQ(op->ref.scope, Scope::kGlobal);
  ASSERT_TRUE(compute_->Wait(op->ref, 30s).ok());
  // The operation can also be read back from its stored selfLink, as a restarted controller would.
  auto ref = ParseOperationLink(op->self_link);
  ASSERT_TRUE(ref.ok()) << ref.error().ToString();
  auto read = compute_->GetOperation(*ref);
  ASSERT_TRUE(read.ok()) << read.error().ToString();
  EXPECT_TRUE(read->done());
  EXPECT_FALSE(read->error.has_value());

  auto got = compute_->GetInstanceTemplate(kProject, "slice-tmpl");
  ASSERT_TRUE(got.ok()) << got.error().ToString();
  EXPECT_EQ(got->at("properties").at("machineType"), kMachineType);
  EXPECT_EQ(got->at("properties").at("labels").at("hyperslice-owner"), "default.slice");

  auto list = compute_->ListInstanceTemplates(kProject, {});
  ASSERT_TRUE(list.ok()) << list.error().ToString();
  EXPECT_EQ(Names(*list), (std::set<std::string>{"slice-tmpl"}));

  auto del = compute_->DeleteInstanceTemplate(kProject, "slice-tmpl");
  ASSERT_TRUE(del.ok()) << del.error().ToString();
  ASSERT_TRUE(compute_->Wait(del->ref, 30s).ok());
  EXPECT_EQ(compute_->GetInstanceTemplate(kProject, "slice-tmpl").error().code,
            Error::Code::kNotFound);
  EXPECT_TRUE(compute_->ListInstanceTemplates(kProject, {})->empty());
}

TEST_F(ComputeSim, ManagedInstanceGroupLifecycleWithInstances) {
  const auto tmpl = MakeTemplate("slice-tmpl");
  const auto policy = MakePolicy("slice-policy");
  auto op =
      compute_->InsertInstanceGroupManager(kProject, kZone, MigBody("slice-mig", tmpl, policy, 2));
  ASSERT_TRUE(op.ok()) << op.error().ToString();
  EXPECT_EQ(op->ref.scope, Scope::kZone);
  ASSERT_TRUE(compute_->Wait(op->ref, 30s).ok());

  auto mig = compute_->GetInstanceGroupManager(kProject, kZone, "slice-mig");
  ASSERT_TRUE(mig.ok()) << mig.error().ToString();
  EXPECT_EQ(mig->at("targetSizePolicy").at("mode"), "BULK");
  EXPECT_EQ(Str(mig->at("resourcePolicies").as_object(), "workloadPolicy"), policy);
  auto migs = compute_->ListInstanceGroupManagers(kProject, kZone, {});
  ASSERT_TRUE(migs.ok());
  EXPECT_EQ(Names(*migs), (std::set<std::string>{"slice-mig"}));

  auto running = [&](size_t n) {
    auto mis = compute_->ListManagedInstances(kProject, kZone, "slice-mig", {});
    if (!mis.ok() || mis->size() != n) return false;
    for (const auto& mi : *mis) {
      if (Str(mi, "instanceStatus") != "RUNNING") return false;
    }
    return true;
  };
  ASSERT_TRUE(Eventually([&] { return running(2); }));
  auto instances = compute_->ListInstances(kProject, kZone, {});
  ASSERT_TRUE(instances.ok());
  ASSERT_EQ(instances->size(), 2u);
  const std::string vm = Str((*instances)[0], "name");
  auto inst = compute_->GetInstance(kProject, kZone, vm);
  ASSERT_TRUE(inst.ok()) << inst.error().ToString();
  EXPECT_EQ(inst->at("status"), "RUNNING");
  EXPECT_NE(Str(*inst, "machineType").find(kMachineType), std::string::npos);

  auto resize = compute_->ResizeInstanceGroupManager(kProject, kZone, "slice-mig", 3);
  ASSERT_TRUE(resize.ok()) << resize.error().ToString();
  ASSERT_TRUE(compute_->Wait(resize->ref, 30s).ok());
  ASSERT_TRUE(Eventually([&] { return running(3); }));
  auto errors = compute_->ListInstanceGroupManagerErrors(kProject, kZone, "slice-mig", {});
  ASSERT_TRUE(errors.ok()) << errors.error().ToString();
  EXPECT_TRUE(errors->empty());

  auto del_vm = compute_->DeleteInstance(kProject, kZone, vm);
  ASSERT_TRUE(del_vm.ok()) << del_vm.error().ToString();
  ASSERT_TRUE(compute_->Wait(del_vm->ref, 30s).ok());
  // Gone; its group may already have re-created it under the same name (a new instance id), as
  // GCE does with a managed VM deleted behind its group's back.
  auto after = compute_->GetInstance(kProject, kZone, vm);
  if (after.ok()) {
    EXPECT_NE(Str(*after, "id"), Str(*inst, "id")) << "the deleted VM is still there";
  } else {
    EXPECT_EQ(after.error().code, Error::Code::kNotFound);
  }

  auto del = compute_->DeleteInstanceGroupManager(kProject, kZone, "slice-mig");
  ASSERT_TRUE(del.ok()) << del.error().ToString();
  ASSERT_TRUE(compute_->Wait(del->ref, 30s).ok());
  EXPECT_EQ(compute_->GetInstanceGroupManager(kProject, kZone, "slice-mig").error().code,
            Error::Code::kNotFound);
  ASSERT_TRUE(Eventually([&] {
    auto l = compute_->ListInstances(kProject, kZone, {});
    return l.ok() && l->empty();
  }));
}

TEST_F(ComputeSim, SubnetworkAndReservationGet) {
  auto subnet = compute_->GetSubnetwork(kProject, kRegion, "default");
  ASSERT_TRUE(subnet.ok()) << subnet.error().ToString();
  EXPECT_EQ(subnet->at("name"), "default");
  EXPECT_EQ(compute_->GetSubnetwork(kProject, kRegion, "nope").error().code,
            Error::Code::kNotFound);
  auto res = compute_->GetReservation(kProject, kZone, "tpu-reservation");
  ASSERT_TRUE(res.ok()) << res.error().ToString();
  EXPECT_EQ(res->at("specificReservation").at("count"), "4");  // int64 as a string
  EXPECT_EQ(compute_->GetReservation(kProject, kZone, "nope").error().reason, "notFound");
}

TEST_F(ComputeSim, WaitLongPollsInsteadOfPolling) {
  control_->Call("POST", "/control/latency", {{"operationMs", 1500}});
  auto op = compute_->InsertInstanceTemplate(kProject, TemplateBody("slow-tmpl"));
  ASSERT_TRUE(op.ok()) << op.error().ToString();
  EXPECT_NE(op->status, "DONE");
  auto done = compute_->Wait(op->ref, 60s);
  ASSERT_TRUE(done.ok()) << done.error().ToString();
  // One operations.wait call held open by the server until DONE; no operations.get at all.
  EXPECT_EQ(control_->Counter("compute.globalOperations.wait"), 1);
  EXPECT_EQ(control_->Counter("compute.globalOperations.get"), 0);

  // A deadline shorter than the operation: kTimeout, the operation still running.
  control_->Call("POST", "/control/latency", {{"operationMs", 60000}});
  auto op2 = compute_->InsertInstanceTemplate(kProject, TemplateBody("slow-tmpl-2"));
  ASSERT_TRUE(op2.ok());
  auto early = compute_->Wait(op2->ref, 300ms);
  ASSERT_FALSE(early.ok());
  EXPECT_EQ(early.error().code, Error::Code::kTimeout);
  EXPECT_EQ(early.error().reason, "operationNotDone");
  auto still = compute_->GetOperation(op2->ref);
  ASSERT_TRUE(still.ok()) << still.error().ToString();
  EXPECT_FALSE(still->done());
}

TEST_F(ComputeSim, FailedOperationCarriesItsErrorCode) {
  const auto tmpl = MakeTemplate("slice-tmpl");
  control_->Call("POST", "/control/operation-failures",
                 {{"method", "compute.instanceGroupManagers.insert"},
                  {"code", "ZONE_RESOURCE_POOL_EXHAUSTED"},
                  {"message", "The zone does not have enough resources."}});
  auto op = compute_->InsertInstanceGroupManager(kProject, kZone, MigBody("m", tmpl, "", 1));
  ASSERT_TRUE(op.ok()) << op.error().ToString();
  auto done = compute_->Wait(op->ref, 30s);
  ASSERT_FALSE(done.ok());
  EXPECT_EQ(done.error().reason, "ZONE_RESOURCE_POOL_EXHAUSTED");
  EXPECT_EQ(done.error().code, Error::Code::kUnavailable);
  EXPECT_NE(done.error().message.find("enough resources"), std::string::npos);
}

TEST_F(ComputeSim, StaleFingerprintIs412AndTheHelperRereads) {
  const std::string vm = OneVm();
  ASSERT_FALSE(vm.empty());
  auto inst = compute_->GetInstance(kProject, kZone, vm).value();
  const std::string fp0 = Str(inst.at("metadata").as_object(), "fingerprint");
  ASSERT_FALSE(fp0.empty());

  // A write with the current fingerprint succeeds and moves the fingerprint on...
  object md{{"fingerprint", fp0},
            {"items", boost::json::array{object{{"key", "kube-labels"}, {"value", "a=b"}}}}};
  auto set = compute_->SetInstanceMetadata(kProject, kZone, vm, md);
  ASSERT_TRUE(set.ok()) << set.error().ToString();
  ASSERT_TRUE(compute_->Wait(set->ref, 30s).ok());
  // ...so a second write with the old one is refused with 412 conditionNotMet.
  auto stale = compute_->SetInstanceMetadata(kProject, kZone, vm, md);
  ASSERT_FALSE(stale.ok());
  EXPECT_EQ(stale.error().http_status, 412);
  EXPECT_EQ(stale.error().code, Error::Code::kConflict);
  EXPECT_EQ(stale.error().reason, "conditionNotMet");
  EXPECT_EQ(control_->Counter("compute.instances.setMetadata"), 2);  // the 412 was not retried

  // The helper: another writer changes the metadata between our read and our write; the helper's
  // write gets 412, it re-reads, re-applies, and succeeds without losing the other write.
  int applied = 0;
  auto op = compute_->UpdateInstanceMetadata(kProject, kZone, vm, [&](MetadataItems& items) {
    if (++applied == 1) {
      auto cur = compute_->GetInstance(kProject, kZone, vm).value();
      auto other = MetadataItemsOf(cur.at("metadata").as_object());
      other["written-by"] = "someone-else";
      boost::json::array list;
      for (const auto& [k, v] : other) list.push_back(object{{"key", k}, {"value", v}});
      auto w = compute_->SetInstanceMetadata(
          kProject, kZone, vm,
          object{{"fingerprint", cur.at("metadata").at("fingerprint")}, {"items", list}});
      EXPECT_TRUE(w.ok() && compute_->Wait(w->ref, 30s).ok());
    }
    items["kubeadm-join-token"] = "abcdef.0123456789abcdef";
    return true;
  });
  ASSERT_TRUE(op.ok()) << op.error().ToString();
  ASSERT_TRUE(op->has_value());
  ASSERT_TRUE(compute_->Wait((*op)->ref, 30s).ok());
  EXPECT_EQ(applied, 2);
  auto final_items =
      MetadataItemsOf(compute_->GetInstance(kProject, kZone, vm)->at("metadata").as_object());
  EXPECT_EQ(final_items["kube-labels"], "a=b");
  EXPECT_EQ(final_items["written-by"], "someone-else");
  EXPECT_EQ(final_items["kubeadm-join-token"], "abcdef.0123456789abcdef");
}

TEST_F(ComputeSim, RetriedInsertWithTheSameRequestIdCreatesNothingNew) {
  // The first attempt reaches the simulator and is applied, but its answer is held back past the
  // client's timeout; the retry (same requestId) must get the original operation, not a 409 and
  // not a second template.
  control_->Call("POST", "/control/latency",
                 {{"method", "compute.instanceTemplates.insert"}, {"apiMs", 3000}});
  auto compute = NewCompute(StaticTokenSource(control_->NewToken()), [&](ComputeOptions& o) {
    o.request_timeout = 1000ms;
    o.retry.sleep = [&](std::chrono::milliseconds) {
      control_->Call("POST", "/control/latency",
                     {{"method", "compute.instanceTemplates.insert"}, {"apiMs", 0}});
    };
  });
  auto op = compute->InsertInstanceTemplate(kProject, TemplateBody("once"));
  ASSERT_TRUE(op.ok()) << op.error().ToString();
  // At least the first attempt timed out (a loaded machine may time out a retry too); every
  // attempt reached the simulator; one answer was a success.
  const auto timed_out = compute->counters().Get("instanceTemplates.insert", "error");
  EXPECT_GE(timed_out, 1u);
  EXPECT_EQ(compute->counters().Get("instanceTemplates.insert", "200"), 1u);
  EXPECT_EQ(control_->Counter("compute.instanceTemplates.insert"),
            static_cast<int64_t>(timed_out) + 1);
  ASSERT_TRUE(compute->Wait(op->ref, 30s).ok());
  auto list = compute->ListInstanceTemplates(kProject, {});
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->size(), 1u);
  // Exactly one insert operation exists in the simulator.
  auto state = control_->Call("GET", "/control/state");
  int inserts = 0;
  for (const auto& o : state.at("operations").as_array()) {
    inserts += o.as_object().at("operationType") == "insert";
  }
  EXPECT_EQ(inserts, 1);

  // A new logical call (new requestId) for the same name is a real second insert: 409.
  auto second = compute->InsertInstanceTemplate(kProject, TemplateBody("once"));
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.error().reason, "alreadyExists");
}

TEST_F(ComputeSim, ReplayingARequestIdReturnsTheOriginalOperation) {
  // The wire-level contract the client relies on, shown with two raw requests.
  net::HttpClient::Options ho;
  ho.base_url = sim_->api_endpoint();
  auto http = net::HttpClient::Create(ho).value();
  net::Request req;
  req.method = "POST";
  req.target = std::string("/projects/") + kProject +
               "/global/instanceTemplates?requestId=2f1c1f4e-8a3b-4c1d-9e2f-0a1b2c3d4e5f";
  req.headers = {{"Authorization", "Bearer " + control_->NewToken()},
                 {"Content-Type", "application/json"}};
  req.body = boost::json::serialize(TemplateBody("replayed"));
  auto first = http->Do(req);
  auto second = http->Do(req);
  ASSERT_TRUE(first.ok() && second.ok());
  ASSERT_EQ(first->status, 200) << first->body;
  ASSERT_EQ(second->status, 200) << second->body;
  EXPECT_EQ(boost::json::parse(first->body).at("name"),
            boost::json::parse(second->body).at("name"));
  EXPECT_EQ(compute_->ListInstanceTemplates(kProject, {})->size(), 1u);
}

TEST_F(ComputeSim, InjectedUnavailableAndRateLimitsAreRetriedToSuccess) {
  const auto tmpl = MakeTemplate("slice-tmpl");
  control_->Call("POST", "/control/faults",
                 {{"method", "compute.instanceTemplates.get"}, {"code", 503}, {"count", 2}});
  auto got = compute_->GetInstanceTemplate(kProject, "slice-tmpl");
  ASSERT_TRUE(got.ok()) << got.error().ToString();
  EXPECT_EQ(control_->Counter("compute.instanceTemplates.get"), 3);
  EXPECT_EQ(compute_->counters().Get("instanceTemplates.get", "503"), 2u);

  control_->Call("POST", "/control/faults",
                 {{"method", "compute.instanceTemplates.get"}, {"code", 429}, {"count", 2}});
  ASSERT_TRUE(compute_->GetInstanceTemplate(kProject, "slice-tmpl").ok());
  EXPECT_EQ(control_->Counter("compute.instanceTemplates.get"), 6);

  control_->Call("POST", "/control/faults",
                 {{"method", "compute.instanceTemplates.get"},
                  {"code", 403},
                  {"reason", "rateLimitExceeded"},
                  {"count", 1}});
  ASSERT_TRUE(compute_->GetInstanceTemplate(kProject, "slice-tmpl").ok());
  EXPECT_EQ(control_->Counter("compute.instanceTemplates.get"), 8);

  // Mutations too, and the retried insert carries one requestId: one policy results.
  control_->Call("POST", "/control/faults",
                 {{"method", "compute.resourcePolicies.insert"}, {"code", 503}, {"count", 1}});
  auto op =
      compute_->InsertResourcePolicy(kProject, kRegion, HighThroughputWorkloadPolicy("p", "2x2x1"));
  ASSERT_TRUE(op.ok()) << op.error().ToString();
  ASSERT_TRUE(compute_->Wait(op->ref, 30s).ok());
  EXPECT_EQ(control_->Counter("compute.resourcePolicies.insert"), 2);
  EXPECT_EQ(sleeps_.size(), 6u);  // 2 + 2 + 1 + 1 backoffs
}

TEST_F(ComputeSim, PermanentBadRequestIsNotRetried) {
  auto body = TemplateBody("bad");
  body["properties"].as_object()["notAField"] = true;
  auto op = compute_->InsertInstanceTemplate(kProject, body);
  ASSERT_FALSE(op.ok());
  EXPECT_EQ(op.error().code, Error::Code::kInvalidArgument);
  EXPECT_EQ(op.error().http_status, 400);
  EXPECT_NE(op.error().message.find("notAField"), std::string::npos) << op.error().message;
  EXPECT_EQ(control_->Counter("compute.instanceTemplates.insert"), 1);

  control_->Call("POST", "/control/faults",
                 {{"method", "compute.instanceTemplates.list"}, {"code", 400}});
  auto list = compute_->ListInstanceTemplates(kProject, {});
  ASSERT_FALSE(list.ok());
  EXPECT_EQ(list.error().code, Error::Code::kInvalidArgument);
  EXPECT_EQ(control_->Counter("compute.instanceTemplates.list"), 1);
  EXPECT_TRUE(sleeps_.empty());
}

TEST_F(ComputeSim, BulkStockoutSurfacesZoneResourcePoolExhausted) {
  control_->Call("POST", "/control/capacity",
                 {{"zone", kZone}, {"machineType", kMachineType}, {"instances", 1}});
  const auto tmpl = MakeTemplate("slice-tmpl");
  const auto policy = MakePolicy("slice-policy", "2x2x2");
  auto op = compute_->InsertInstanceGroupManager(kProject, kZone,
                                                 MigBody("slice-mig", tmpl, policy, 2, "BULK"));
  ASSERT_TRUE(op.ok()) << op.error().ToString();
  ASSERT_TRUE(compute_->Wait(op->ref, 30s).ok());

  // The stockout shows in listManagedInstances (lastAttempt) and listErrors...
  ASSERT_TRUE(Eventually([&] {
    auto mis = compute_->ListManagedInstances(kProject, kZone, "slice-mig", {});
    if (!mis.ok() || mis->size() != 2) return false;
    for (const auto& mi : *mis) {
      auto e = LastAttemptError(mi);
      if (!e || e->reason != "ZONE_RESOURCE_POOL_EXHAUSTED") return false;
    }
    return true;
  }));
  auto errors = compute_->ListInstanceGroupManagerErrors(kProject, kZone, "slice-mig", {});
  ASSERT_TRUE(errors.ok()) << errors.error().ToString();
  ASSERT_FALSE(errors->empty());
  auto first = ManagedInstanceError(errors->front());
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->reason, "ZONE_RESOURCE_POOL_EXHAUSTED");
  // ...and in the group's bulkInstanceOperation; no VM exists although one would have fit.
  auto mig = compute_->GetInstanceGroupManager(kProject, kZone, "slice-mig");
  ASSERT_TRUE(mig.ok());
  EXPECT_TRUE(mig->at("status").as_object().contains("bulkInstanceOperation"))
      << boost::json::serialize(mig->at("status"));
  EXPECT_TRUE(compute_->ListInstances(kProject, kZone, {})->empty());

  // Capacity appears: the whole slice is created, never a part of it.
  control_->Call("POST", "/control/capacity",
                 {{"zone", kZone}, {"machineType", kMachineType}, {"instances", 2}});
  std::set<size_t> seen_counts;
  ASSERT_TRUE(Eventually([&] {
    auto l = compute_->ListInstances(kProject, kZone, {});
    if (!l.ok()) return false;
    seen_counts.insert(l->size());
    return l->size() == 2;
  }));
  EXPECT_EQ(seen_counts.count(1), 0u);
}

// instances.insert through the client: an Operation like the other inserts, kAlreadyExists for
// a taken name, and a stockout as the operation's error with GCE's code as the reason.
TEST_F(ComputeSim, InstanceInsertAlreadyExistsAndStockout) {
  auto body = [](const std::string& name) {
    return object{
        {"name", name},
        {"machineType", "zones/" + std::string(kZone) + "/machineTypes/" + kMachineType},
        {"disks",
         boost::json::array{object{
             {"boot", true},
             {"initializeParams",
              object{{"sourceImage", "projects/debian-cloud/global/images/family/debian-12"}}}}}},
        {"metadata", object{{"items", boost::json::array{object{{"key", "k"}, {"value", "v"}}}}}},
    };
  };
  auto op = compute_->InsertInstance(kProject, kZone, body("vm-1"));
  ASSERT_TRUE(op.ok()) << op.error().ToString();
  EXPECT_EQ(op->ref.scope, Scope::kZone);
  EXPECT_EQ(op->ref.location, kZone);
  ASSERT_TRUE(compute_->Wait(op->ref, 30s).ok());
  auto got = compute_->GetInstance(kProject, kZone, "vm-1");
  ASSERT_TRUE(got.ok()) << got.error().ToString();
  EXPECT_EQ(Str(*got, "selfLink"), op->target_link);
  EXPECT_EQ(MetadataItemsOf(got->at("metadata").as_object())["k"], "v");

  auto again = compute_->InsertInstance(kProject, kZone, body("vm-1"));
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error().code, Error::Code::kAlreadyExists);
  EXPECT_EQ(again.error().reason, "alreadyExists");

  control_->Call("POST", "/control/stockout",
                 {{"zone", kZone}, {"machineType", kMachineType}, {"enabled", true}});
  auto out = compute_->InsertInstance(kProject, kZone, body("vm-2"));
  ASSERT_TRUE(out.ok()) << out.error().ToString();
  auto failed = compute_->Wait(out->ref, 30s);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.error().reason, "ZONE_RESOURCE_POOL_EXHAUSTED");
  EXPECT_EQ(compute_->GetInstance(kProject, kZone, "vm-2").error().code, Error::Code::kNotFound);
  EXPECT_EQ(control_->Counter("compute.instances.insert"), 3);
}

}  // namespace
}  // namespace hyperslice::gce::testing
