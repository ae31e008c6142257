// The orphan sweep (internal/orphans.h).
//
// Safety argument, in order of the steps of one sweep:
//  1. GCE is listed first, the TPUNodeGroups second. A GCE resource can only name a group that
//     existed before the resource was created, so every group a listed resource belongs to is in
//     the later list unless it has really gone: a group created during the sweep cannot be taken
//     for gone.
//  2. A resource is a candidate only when its owner marks say "this cluster" and name a uid:
//     templates by their labels (hyperslice-managed=true, hyperslice-cluster=<id>,
//     hyperslice-group-uid), MIGs and resource policies (no labels in GCE) by the owner marker
//     ending their description. The server-side list filter only narrows the listing; the marks
//     are re-checked here, so a filter GCE reads more loosely can never widen what is deleted.
//  3. Any error listing TPUNodeGroups aborts the sweep before a delete.
//  4. Deletes go MIGs → templates → policies (a template or policy in use cannot go first), each
//     delete waited for; when one of a group's deletes fails, its later kinds are left for the
//     next sweep.
#include "src/tpu/internal/orphans.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <set>
#include <thread>
#include <utility>

#include <boost/json.hpp>

#include "src/base/json.h"
#include "src/base/log.h"
#include "src/gce/compute.h"
#include "src/kube/client.h"
#include "src/kube/manager.h"
#include "src/kube/metrics.h"
#include "src/tpu/api.h"
#include "src/tpu/internal/gce_child.h"

namespace hyperslice::tpu::internal {

using jsonfield::ObjectField;
using jsonfield::StringValue;

namespace json = boost::json;

namespace {

constexpr auto kDeleteWait = std::chrono::minutes(3);

// Quoted regular expression (RE2 and ECMAScript agree on these escapes) matching `s` literally.
std::string RegexQuote(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (std::isalnum(static_cast<unsigned char>(c)) == 0 && c != '-' && c != '_') out += '\\';
    out += c;
  }
  return out;
}

// GCE list filter for descriptions carrying this cluster's owner marker (narrows the listing;
// candidates are re-checked with OwnerMarksFromDescription).
std::string DescriptionFilter(const std::string& cluster_id) {
  return "description eq '.*hyperslice owner=.* cluster=" + RegexQuote(cluster_id) + "'";
}

bool SameCluster(const std::string& mark, const std::string& cluster_id) {
  return !mark.empty() && (mark == cluster_id || mark == GceLabelValue(cluster_id));
}

struct Candidate {
  std::string project, location, name, self_link, uid;
};

enum class Kind { kMig, kTemplate, kPolicy };

const char* KindName(Kind k) {
  switch (k) {
    case Kind::kMig:
      return "instanceGroupManager";
    case Kind::kTemplate:
      return "instanceTemplate";
    case Kind::kPolicy:
      return "resourcePolicy";
  }
  return "";
}

Candidate FromResource(const json::object& r, const std::string& project,
                       const std::string& location, std::string uid) {
  return Candidate{project, location, StringValue(r, "name"), StringValue(r, "selfLink"),
                   std::move(uid)};
}

Status Collect(gce::Compute& compute, const std::string& cluster_id,
               const std::vector<std::string>& projects, const std::vector<std::string>& zones,
               std::map<Kind, std::vector<Candidate>>& out) {
  std::set<std::string> regions;
  for (const auto& z : zones) {
    if (auto r = RegionOfZone(z); r.ok()) regions.insert(*r);
  }
  gce::ListOptions by_description{.filter = DescriptionFilter(cluster_id)};
  gce::ListOptions by_labels{.filter = "properties.labels." + std::string(kGceLabelManaged) +
                                       "=true AND properties.labels." + kGceLabelCluster + "=" +
                                       GceLabelValue(cluster_id)};
  for (const auto& project : projects) {
    for (const auto& zone : zones) {
      HS_ASSIGN_OR_RETURN(auto migs,
                          compute.ListInstanceGroupManagers(project, zone, by_description));
      for (const auto& m : migs) {
        OwnerMarks marks = OwnerMarksFromDescription(StringValue(m, "description"));
        if (!SameCluster(marks.cluster, cluster_id) || marks.uid.empty()) continue;
        out[Kind::kMig].push_back(FromResource(m, project, zone, marks.uid));
      }
    }
    HS_ASSIGN_OR_RETURN(auto templates, compute.ListInstanceTemplates(project, by_labels));
    for (const auto& t : templates) {
      const json::object* props = ObjectField(t, "properties");
      const json::object* labels = props != nullptr ? ObjectField(*props, "labels") : nullptr;
      if (labels == nullptr || StringValue(*labels, kGceLabelManaged) != "true") continue;
      OwnerMarks marks = OwnerMarksFromLabels(*labels);
      if (!SameCluster(marks.cluster, cluster_id) || marks.uid.empty()) continue;
      out[Kind::kTemplate].push_back(FromResource(t, project, "", marks.uid));
    }
    for (const auto& region : regions) {
      HS_ASSIGN_OR_RETURN(auto policies,
                          compute.ListResourcePolicies(project, region, by_description));
      for (const auto& p : policies) {
        OwnerMarks marks = OwnerMarksFromDescription(StringValue(p, "description"));
        if (!SameCluster(marks.cluster, cluster_id) || marks.uid.empty()) continue;
        out[Kind::kPolicy].push_back(FromResource(p, project, region, marks.uid));
      }
    }
  }
  return OkStatus();
}

// Uids of the TPUNodeGroups that exist, in both the raw and the label-value form.
Result<std::set<std::string>> LiveGroupUids(kube::Client& client) {
  HS_ASSIGN_OR_RETURN(auto list, client.ListAll(TPUNodeGroups(), ""));
  std::set<std::string> uids;
  for (const auto& g : list.items) {
    const json::object* meta = ObjectField(g, "metadata");
    std::string uid = meta != nullptr ? StringValue(*meta, "uid") : "";
    if (uid.empty()) continue;
    uids.insert(uid);
    uids.insert(GceLabelValue(uid));
  }
  return uids;
}

Status DeleteAndWait(gce::Compute& compute, Kind kind, const Candidate& c) {
  Result<gce::Operation> op = [&] {
    switch (kind) {
      case Kind::kMig:
        return compute.DeleteInstanceGroupManager(c.project, c.location, c.name);
      case Kind::kTemplate:
        return compute.DeleteInstanceTemplate(c.project, c.name);
      case Kind::kPolicy:
        return compute.DeleteResourcePolicy(c.project, c.location, c.name);
    }
    return Result<gce::Operation>(Error::Make(Error::Code::kInternal, "unknown kind"));
  }();
  if (!op.ok()) {
    if (op.error().code == Error::Code::kNotFound) return OkStatus();  // gone already
    return op.error();
  }
  if (op->done()) {
    if (op->error) return *op->error;
    return OkStatus();
  }
  HS_RETURN_IF_ERROR(compute.Wait(op->ref, kDeleteWait));
  return OkStatus();
}

}  // namespace

Result<SweepReport> SweepOrphans(const OperatorOptions& options, const std::string& cluster_id,
                                 const std::vector<std::string>& projects,
                                 const std::vector<std::string>& zones) {
  if (!options.client || !options.compute) {
    return Error::Make(Error::Code::kInvalidArgument, "orphan sweep needs a client and compute");
  }
  if (cluster_id.empty()) {
    // Without a cluster id every cluster's resources would look like ours.
    return Error::Make(Error::Code::kInvalidArgument, "orphan sweep needs a cluster id");
  }
  std::map<Kind, std::vector<Candidate>> candidates;
  HS_RETURN_IF_ERROR(Collect(*options.compute, cluster_id, projects, zones, candidates));
  SweepReport report;
  if (candidates.empty()) return report;
  // After the GCE listing (see the top of this file).
  HS_ASSIGN_OR_RETURN(std::set<std::string> live, LiveGroupUids(*options.client));

  std::set<std::string> failed_uids;
  for (Kind kind : {Kind::kMig, Kind::kTemplate, Kind::kPolicy}) {
    for (const Candidate& c : candidates[kind]) {
      if (live.count(c.uid) > 0) continue;
      if (failed_uids.count(c.uid) > 0) {
        report.errors.push_back(
            std::string(KindName(kind)) + " " + c.name +
            ": left for the next sweep (an earlier delete of its group failed)");
        continue;
      }
      Status st = DeleteAndWait(*options.compute, kind, c);
      if (!st.ok()) {
        failed_uids.insert(c.uid);
        report.errors.push_back(std::string(KindName(kind)) + " " + c.name + ": " +
                                st.error().ToString());
        log::Warn("orphan sweep: delete failed", {{"kind", KindName(kind)},
                                                  {"name", c.name},
                                                  {"uid", c.uid},
                                                  {"error", st.error().ToString()}});
        continue;
      }
      log::Info(
          "orphan sweep: deleted",
          {{"kind", KindName(kind)}, {"name", c.name}, {"project", c.project}, {"uid", c.uid}});
      report.deleted.push_back(c.self_link.empty() ? c.name : c.self_link);
    }
  }
  return report;
}

namespace {

// The leader-only periodic sweep. Locations are the live groups' plus every one seen before (a
// group deleted while the operator was down leaves no other trace of where its resources are).
class OrphanSweeper : public kube::Runnable {
 public:
  OrphanSweeper(OperatorOptions options, kube::metrics::Registry& registry)
      : options_(std::move(options)),
        clock_(options_.clock != nullptr ? options_.clock : &RealClock()),
        deleted_(registry.GetCounter("hyperslice_tpu_orphans_deleted_total",
                                     "GCE resources deleted by the orphan sweep")),
        sweeps_ok_(registry.GetCounter("hyperslice_tpu_orphan_sweeps_total",
                                       "Orphan sweeps by result", {{"result", "success"}})),
        sweeps_failed_(registry.GetCounter("hyperslice_tpu_orphan_sweeps_total",
                                           "Orphan sweeps by result", {{"result", "error"}})) {}
  ~OrphanSweeper() override { Stop(std::chrono::milliseconds(0)); }

  std::string Name() const override { return "tpu-orphan-sweep"; }
  void SetLeaderGate(std::function<bool()> gate) override { gate_ = std::move(gate); }

  Status Start() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (thread_.joinable()) return OkStatus();
    stop_ = false;
    clock_->Register(&cv_);
    thread_ = std::thread([this] { Loop(); });
    return OkStatus();
  }

  void Stop(std::chrono::milliseconds /*grace*/) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) {
      thread_.join();
      clock_->Unregister(&cv_);
    }
  }

 private:
  void Loop() {
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        auto deadline = clock_->Now() + options_.orphan_sweep_interval;
        while (!stop_ && !clock_->WaitUntil(cv_, lock, deadline)) {
        }
        if (stop_) return;
      }
      if (gate_ && !gate_()) continue;
      SweepOnce();
    }
  }

  void SweepOnce() {
    if (cluster_id_.empty()) {
      cluster_id_ = options_.cluster_id;
      if (cluster_id_.empty()) {
        auto ns = options_.client->Get(kube::resources::Namespaces(), "", "kube-system");
        const json::object* meta = ns.ok() ? ObjectField(*ns, "metadata") : nullptr;
        if (meta != nullptr) cluster_id_ = StringValue(*meta, "uid");
      }
      if (cluster_id_.empty()) {
        sweeps_failed_.Inc();
        log::Warn("orphan sweep: no cluster id yet (kube-system unreadable)");
        return;
      }
    }
    auto groups = options_.client->ListAll(TPUNodeGroups(), "");
    if (!groups.ok()) {
      sweeps_failed_.Inc();
      log::Warn("orphan sweep: listing TPUNodeGroups failed",
                {{"error", groups.error().ToString()}});
      return;
    }
    for (const auto& g : groups->items) {
      const json::object* spec = ObjectField(g, "spec");
      if (spec == nullptr) continue;
      std::string project = StringValue(*spec, "project"),
                  zone = StringValue(*spec, "nodeLocation");
      if (!project.empty()) projects_.insert(project);
      if (!zone.empty() && RegionOfZone(zone).ok()) zones_.insert(zone);
    }
    if (projects_.empty() || zones_.empty()) {
      sweeps_ok_.Inc();
      return;
    }
    auto report = SweepOrphans(options_, cluster_id_, {projects_.begin(), projects_.end()},
                               {zones_.begin(), zones_.end()});
    if (!report.ok()) {
      sweeps_failed_.Inc();
      log::Warn("orphan sweep failed", {{"error", report.error().ToString()}});
      return;
    }
    deleted_.Inc(static_cast<double>(report->deleted.size()));
    (report->errors.empty() ? sweeps_ok_ : sweeps_failed_).Inc();
  }

  OperatorOptions options_;
  Clock* clock_;
  kube::metrics::Counter& deleted_;
  kube::metrics::Counter& sweeps_ok_;
  kube::metrics::Counter& sweeps_failed_;
  std::function<bool()> gate_;
  // Touched only by the sweep thread.
  std::string cluster_id_;
  std::set<std::string> projects_, zones_;

  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace

Status RegisterOrphanSweep(kube::Manager& mgr, const OperatorOptions& options) {
  if (options.orphan_sweep_interval <= Clock::Duration::zero()) return OkStatus();
  if (!options.client || !options.compute) {
    return Error::Make(Error::Code::kInvalidArgument,
                       "the orphan sweep needs OperatorOptions.client and .compute");
  }
  mgr.Add(std::make_shared<OrphanSweeper>(options, mgr.registry()));
  return OkStatus();
}

}  // namespace hyperslice::tpu::internal
