#include "src/runners/controlnode/gce_runner.h"

#include <algorithm>
#include <cstdio>

#include <boost/json.hpp>

#include "src/base/json.h"
#include "src/base/log.h"
#include "src/kube/client.h"
#include "src/kube/object_helpers.h"
#include "src/kube/store.h"

namespace hyperslice::runners::controlnode {
namespace {

namespace json = boost::json;
using jsonfield::ObjectField;
using jsonfield::StringField;
using jsonfield::StringValue;
using Ms = std::chrono::milliseconds;
using Code = Error::Code;

constexpr size_t kMaxName = 63;

// FNV-1a, 32 bits: a stable short suffix that keeps truncated names distinct.
std::string Hash8(std::string_view s) {
  uint32_t h = 2166136261u;
  for (unsigned char c : s) {
    h ^= c;
    h *= 16777619u;
  }
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", h);
  return buf;
}

// `s` with characters outside [a-z0-9-] replaced, cut to 63 with a hash of `whole` when longer.
std::string Fit(std::string s, std::string_view whole, char replacement) {
  for (char& c : s) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
    if (!ok) c = replacement;
  }
  if (s.size() <= kMaxName) return s;
  return s.substr(0, kMaxName - 9) + "-" + Hash8(whole);
}

std::string LastSegment(std::string_view s) {
  auto slash = s.rfind('/');
  return std::string(slash == std::string_view::npos ? s : s.substr(slash + 1));
}

std::string NetworkIp(const json::object& instance) {
  const auto* nics = jsonfield::ArrayField(instance, "networkInterfaces");
  if (nics == nullptr || nics->empty() || !(*nics)[0].is_object()) return {};
  return StringValue((*nics)[0].as_object(), "networkIP");
}

// The Runner's one-time token was used (the link server annotates the Runner when it consumes it).
bool TokenConsumed(const kube::Object& runner) {
  const json::object* meta = ObjectField(runner, "metadata");
  const json::object* annotations = meta ? ObjectField(*meta, "annotations") : nullptr;
  return annotations != nullptr && !StringField(*annotations, kJoinTokenConsumedAnnotation).empty();
}

bool HasMetadataItem(const json::object& instance, const char* key) {
  const json::object* md = ObjectField(instance, "metadata");
  return md != nullptr && gce::MetadataItemsOf(*md).contains(key);
}

std::string LabelOf(const json::object& instance, const char* key) {
  const json::object* labels = ObjectField(instance, "labels");
  return labels != nullptr ? StringValue(*labels, key) : std::string();
}

}  // namespace

std::string GceInstanceName(std::string_view runner) {
  std::string name = "hs-runner-" + std::string(runner);
  std::string fitted = Fit(name, runner, '-');
  // Runner names end in [a-z0-9], hashes too: the GCE rule's last character holds.
  return fitted;
}

std::string GceLabelValue(std::string_view value) { return Fit(std::string(value), value, '_'); }

json::object GceInstanceBody(const RunnerSpec::Gce& spec, const GceBoot& boot,
                             const GceProvisionerOptions& options) {
  const std::string zone_path = "zones/" + spec.zone;
  json::array items{
      json::object{{"key", kMetadataRunnerName}, {"value", boot.runner_name}},
      json::object{{"key", kMetadataLinkEndpoint}, {"value", boot.link_endpoint}},
      json::object{{"key", kMetadataRunnersCa}, {"value", boot.ca_bundle_pem}},
      json::object{{"key", kMetadataJoinToken}, {"value", boot.join_token}},
  };
  if (!options.startup_script.empty()) {
    items.push_back(json::object{{"key", "startup-script"}, {"value", options.startup_script}});
  }
  json::object body{
      {"name", GceInstanceName(boot.runner_name)},
      {"description", "hyperslice linked runner " + boot.runner_name},
      {"machineType", zone_path + "/machineTypes/" + spec.machine_type},
      {"disks", json::array{json::object{
                    {"boot", true},
                    {"autoDelete", true},
                    {"type", "PERSISTENT"},
                    {"initializeParams",
                     json::object{{"sourceImage", options.boot_image},
                                  // int64 fields travel as strings in GCE's JSON.
                                  {"diskSizeGb", std::to_string(options.boot_disk_gb)}}}}}},
      // No accessConfigs: a private address only; the agent dials out to the link server.
      {"networkInterfaces", json::array{json::object{{"network", options.network}}}},
      {"metadata", json::object{{"items", std::move(items)}}},
      {"labels", json::object{{kLabelRunner, GceLabelValue(boot.runner_name)},
                              {kLabelRunnerUid, GceLabelValue(boot.runner_uid)},
                              {kLabelManagedBy, "hyperslice"}}},
  };
  // Accelerator VMs cannot live-migrate: GCE refuses MIGRATE for them.
  const bool accelerated = spec.accelerator_count > 0;
  if (accelerated) {
    body["guestAccelerators"] = json::array{
        json::object{{"acceleratorType", zone_path + "/acceleratorTypes/" + spec.accelerator_type},
                     {"acceleratorCount", spec.accelerator_count}}};
  }
  body["scheduling"] = json::object{{"onHostMaintenance", accelerated ? "TERMINATE" : "MIGRATE"},
                                    {"automaticRestart", true}};
  return body;
}

GceRunnerProvisioner::GceRunnerProvisioner(GceProvisionerOptions options, Store store)
    : options_(std::move(options)),
      recorder_(std::move(store), "instance",
                {"operation", "lastError", "selfLink", "id", "status", "networkIP"},
                options_.retry_initial, options_.retry_max, options_.clock) {}

Result<std::optional<ProvisionOutcome>> GceRunnerProvisioner::WaitRecorded(
    const std::string& runner, json::object& instance) {
  std::string link = StringValue(instance, "operation");
  if (link.empty()) return std::optional<ProvisionOutcome>();
  auto ref = gce::ParseOperationLink(link);
  if (!ref.ok()) {
    instance.erase("operation");  // unusable; observe the instance instead
    return std::optional<ProvisionOutcome>();
  }
  auto done = options_.compute->Wait(*ref, options_.operation_wait);
  if (!done.ok() && done.error().reason == "operationNotDone") {
    return std::optional<ProvisionOutcome>(
        ProvisionOutcome{.ready = false,
                         .reason = "InstanceOperationPending",
                         .message = "waiting for GCE operation " + ref->name,
                         .requeue_after = Ms(1000)});
  }
  instance.erase("operation");
  if (done.ok() || done.error().code == Code::kNotFound) {
    // DONE, or an operation GCE no longer knows (they expire): the instance tells the rest.
    return std::optional<ProvisionOutcome>();
  }
  // The operation failed: what GCE said is the condition, and the next insert backs off.
  const Error& e = done.error();
  ProvisionOutcome failed = recorder_.NoteFailure(
      instance, e.reason.empty() ? "InstanceCreateFailed" : e.reason, e.message);
  HS_RETURN_IF_ERROR(recorder_.Record(runner, instance));
  return std::optional<ProvisionOutcome>(failed);
}

Result<ProvisionOutcome> GceRunnerProvisioner::Reconcile(const kube::Object& runner,
                                                         const RunnerSpec& spec,
                                                         json::object& status) {
  const std::string name = spec.name;
  const std::string uid(kube::MetaString(runner, "uid"));
  const auto& g = spec.gce;
  ProvisionRecord record = recorder_.Open(name, status);
  // Finish drops what is gone since (a finished operation, a cleared error) from the status.
  json::object& instance = record.holder();
  instance["name"] = GceInstanceName(name);
  instance["zone"] = g.zone;
  instance["project"] = g.project;

  HS_ASSIGN_OR_RETURN(auto pending, WaitRecorded(name, instance));
  if (pending) return record.Finish(*pending);

  auto got = options_.compute->GetInstance(g.project, g.zone, GceInstanceName(name));
  if (got.ok()) {
    std::string owner = LabelOf(*got, kLabelRunnerUid);
    if (owner != GceLabelValue(uid)) {
      return record.Finish(ProvisionOutcome{
          .reason = "InstanceNameTaken",
          .message = "instance " + GceInstanceName(name) + " in " + g.zone +
                     " exists and is not this Runner's (label " + kLabelRunnerUid + "=" +
                     (owner.empty() ? "<none>" : owner) + "); delete or rename it",
          .warning = true,
          .requeue_after = recorder_.Backoff(1)});
    }
    instance["selfLink"] = StringValue(*got, "selfLink");
    instance["id"] = StringValue(*got, "id");
    std::string st = StringValue(*got, "status");
    instance["status"] = st;
    instance["machineType"] = LastSegment(StringField(*got, "machineType"));
    if (auto ip = NetworkIp(*got); !ip.empty()) instance["networkIP"] = ip;
    instance.erase("lastError");
    if (st == "RUNNING" && TokenConsumed(runner) && HasMetadataItem(*got, kMetadataJoinToken)) {
      HS_ASSIGN_OR_RETURN(auto removing, RemoveJoinToken(name, g, instance));
      if (removing) return record.Finish(*removing);
    }
    if (st == "RUNNING") {
      return record.Finish(ProvisionOutcome{
          .ready = true,
          .reason = "InstanceRunning",
          .message = "instance " + GceInstanceName(name) + " is RUNNING in " + g.zone});
    }
    return record.Finish(
        ProvisionOutcome{.reason = "Instance" + std::string(st.empty() ? "Unknown" : st),
                         .message = "instance " + GceInstanceName(name) + " is " + st,
                         .requeue_after = Ms(2000)});
  }
  if (got.error().code != Code::kNotFound) return got.error();

  // No instance. A recent failure: wait out its backoff, whatever woke this reconcile.
  instance.erase("selfLink");
  instance.erase("id");
  instance.erase("status");
  instance.erase("networkIP");
  if (auto waiting = recorder_.BackingOff(instance)) return record.Finish(*waiting);
  HS_ASSIGN_OR_RETURN(auto token, recorder_.JoinToken(name));
  if (!token) return record.Finish(recorder_.NoJoinToken());
  GceBoot boot{.runner_name = name,
               .runner_uid = uid,
               .link_endpoint = options_.link_endpoint,
               .ca_bundle_pem = options_.ca_bundle_pem,
               .join_token = std::move(*token)};
  auto op = options_.compute->InsertInstance(g.project, g.zone, GceInstanceBody(g, boot, options_));
  boot.join_token.assign(boot.join_token.size(), '\0');
  if (!op.ok()) {
    if (op.error().code == Code::kAlreadyExists) {
      // An earlier insert landed (a lost answer): observe it next time.
      return record.Finish(ProvisionOutcome{.reason = "InstanceCreating",
                                            .message = "instance exists; observing it",
                                            .requeue_after = Ms(500)});
    }
    ProvisionOutcome failed = recorder_.NoteFailure(
        instance, op.error().reason.empty() ? "InstanceCreateFailed" : op.error().reason,
        op.error().message);
    HS_RETURN_IF_ERROR(recorder_.Record(name, instance));
    return record.Finish(failed);
  }
  log::Info("runners: creating instance", {{"runner", name},
                                           {"instance", GceInstanceName(name)},
                                           {"zone", g.zone},
                                           {"operation", op->ref.name}});
  instance["operation"] = op->self_link;
  if (!op->target_link.empty()) instance["selfLink"] = op->target_link;
  // Recorded before waiting: a restart resumes this operation rather than inserting again.
  HS_RETURN_IF_ERROR(recorder_.Record(name, instance));
  HS_ASSIGN_OR_RETURN(auto waited, WaitRecorded(name, instance));
  if (waited) return record.Finish(*waited);
  return record.Finish(
      ProvisionOutcome{.reason = "InstanceCreating",
                       .message = "instance " + GceInstanceName(name) + " created in " + g.zone,
                       .requeue_after = Ms(200)});
}

Result<std::optional<ProvisionOutcome>> GceRunnerProvisioner::RemoveJoinToken(
    const std::string& runner, const RunnerSpec::Gce& g, json::object& instance) {
  const std::string vm = GceInstanceName(runner);
  // Fingerprint-checked read-modify-write: an item someone else wrote meanwhile (412) is re-read.
  auto op = options_.compute->UpdateInstanceMetadata(
      g.project, g.zone, vm,
      [](gce::MetadataItems& items) { return items.erase(kMetadataJoinToken) > 0; });
  // The instance runs and its agent linked: a failure here only delays the removal.
  const ProvisionOutcome later{.ready = true,
                               .reason = "InstanceRunning",
                               .message = "instance " + vm + " is RUNNING in " + g.zone +
                                          "; removing the used join token from its metadata",
                               .requeue_after = Ms(2000)};
  if (!op.ok()) {
    log::Warn("runners: cannot remove the join token from the instance's metadata",
              {{"runner", runner}, {"instance", vm}, {"error", op.error().message}});
    return std::optional<ProvisionOutcome>(later);
  }
  if (!*op) return std::optional<ProvisionOutcome>();  // already gone
  log::Info("runners: removing the used join token from the instance's metadata",
            {{"runner", runner}, {"instance", vm}, {"operation", (*op)->ref.name}});
  instance["operation"] = (*op)->self_link;
  HS_RETURN_IF_ERROR(recorder_.Record(runner, instance));
  HS_ASSIGN_OR_RETURN(auto waited, WaitRecorded(runner, instance));
  if (!waited) return std::optional<ProvisionOutcome>();  // DONE: the caller reports RUNNING
  ProvisionOutcome o = later;
  o.message += ": " + waited->message;
  return std::optional<ProvisionOutcome>(o);
}

Result<bool> GceRunnerProvisioner::Finalize(const kube::Object& runner, json::object& status) {
  const std::string name(kube::MetaString(runner, "name"));
  const std::string uid(kube::MetaString(runner, "uid"));
  ProvisionRecord record = recorder_.Open(name, status);
  json::object& instance = record.holder();
  auto spec = ParseRunner(runner);
  // Where the instance is: the spec, else what status recorded (a spec that no longer parses).
  std::string project = spec.ok() ? spec->gce.project : StringValue(instance, "project");
  std::string zone = spec.ok() ? spec->gce.zone : StringValue(instance, "zone");
  if (project.empty() || zone.empty()) return true;  // never had an instance we could name
  auto pending = WaitRecorded(name, instance);
  record.Keep();
  if (!pending.ok()) return pending.error();
  if (*pending && (*pending)->reason == "InstanceOperationPending") return false;

  auto got = options_.compute->GetInstance(project, zone, GceInstanceName(name));
  if (!got.ok()) {
    if (got.error().code == Code::kNotFound) return true;
    return got.error();
  }
  if (LabelOf(*got, kLabelRunnerUid) != GceLabelValue(uid)) return true;  // not ours to delete
  if (StringField(*got, "status") == "STOPPING" && !instance.contains("operation")) {
    // A delete is under way (ours, before a restart lost its operation): GET again later.
    return false;
  }
  auto op = options_.compute->DeleteInstance(project, zone, GceInstanceName(name));
  if (!op.ok()) {
    if (op.error().code == Code::kNotFound) return true;
    return op.error();
  }
  log::Info("runners: deleting instance",
            {{"runner", name}, {"instance", GceInstanceName(name)}, {"zone", zone}});
  instance["operation"] = op->self_link;
  HS_RETURN_IF_ERROR(recorder_.Record(name, instance));
  auto waited = WaitRecorded(name, instance);
  record.Keep();
  if (!waited.ok()) return waited.error();
  if (*waited) return false;  // still running, or failed: the next reconcile tries again
  auto after = options_.compute->GetInstance(project, zone, GceInstanceName(name));
  return !after.ok() && after.error().code == Code::kNotFound;
}

}  // namespace hyperslice::runners::controlnode
