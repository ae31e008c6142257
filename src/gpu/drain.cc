#include "src/gpu/drain.h"

#include <boost/json.hpp>

#include "src/base/json.h"
#include "src/gpu/disruption.h"
#include "src/kube/client.h"
#include "src/kube/object_helpers.h"
#include "src/kube/scheduling.h"

namespace hyperslice::gpu {
namespace {

namespace bj = boost::json;
using jsonfield::ObjectField;
using jsonfield::StringField;

std::string Key(const bj::object& pod) {
  const bj::object* m = ObjectField(pod, "metadata");
  if (m == nullptr) return "";
  return std::string(StringField(*m, "namespace")) + "/" + std::string(StringField(*m, "name"));
}

// Puts karpenter.sh/disrupted:NoSchedule on the Node (a PUT on the version read: the taint list
// is replaced whole, so a concurrent change fails this and the next step retries).
Status Taint(kube::Client& client, const kube::Object& node) {
  const bj::object* node_spec = ObjectField(node, "spec");
  for (const auto& t : kube::TaintsFrom(node_spec ? node_spec->if_contains("taints") : nullptr))
    if (t.key == kTaintDisrupted) return OkStatus();
  kube::Object updated = node;
  if (!updated.contains("spec") || !updated["spec"].is_object()) updated["spec"] = bj::object{};
  bj::object& spec = updated["spec"].as_object();
  if (!spec.contains("taints") || !spec["taints"].is_array()) spec["taints"] = bj::array{};
  spec["taints"].as_array().push_back(
      bj::object{{"key", kTaintDisrupted}, {"value", "true"}, {"effect", "NoSchedule"}});
  auto written = client.Update(kube::resources::Nodes(), "", updated);
  if (!written.ok()) return written.error();
  return OkStatus();
}

// What a 429 from the eviction subresource says: the budget's own words (its causes name it).
std::string EvictionRefusal(const std::string& body) {
  boost::system::error_code ec;
  bj::value v = bj::parse(body, ec);
  if (ec || !v.is_object()) return "a PodDisruptionBudget allows no disruption now";
  std::string out(StringField(v.as_object(), "message"));
  if (const bj::object* details = ObjectField(v.as_object(), "details")) {
    if (const auto* causes = details->if_contains("causes"); causes && causes->is_array()) {
      for (const auto& c : causes->as_array())
        if (c.is_object()) out += " (" + std::string(StringField(c.as_object(), "message")) + ")";
    }
  }
  return out.empty() ? "a PodDisruptionBudget allows no disruption now" : out;
}

}  // namespace

DrainAction ClassifyForDrain(const bj::object& pod) {
  const bj::object* status = ObjectField(pod, "status");
  std::string_view phase = status != nullptr ? StringField(*status, "phase") : "";
  if (phase == "Succeeded" || phase == "Failed") return DrainAction::kIgnore;
  const bj::object* meta = ObjectField(pod, "metadata");
  if (meta != nullptr) {
    if (const bj::object* ann = ObjectField(*meta, "annotations");
        ann != nullptr && ann->contains("kubernetes.io/config.mirror"))
      return DrainAction::kIgnore;
    if (const auto* owners = meta->if_contains("ownerReferences"); owners && owners->is_array()) {
      for (const auto& o : owners->as_array())
        if (o.is_object() && StringField(o.as_object(), "kind") == "DaemonSet")
          return DrainAction::kIgnore;
    }
  }
  const bj::object* spec = ObjectField(pod, "spec");
  const kube::Taint disrupted{kTaintDisrupted, "true", "NoSchedule"};
  for (const auto& t : kube::TolerationsFrom(spec ? spec->if_contains("tolerations") : nullptr))
    if (kube::Tolerates(t, disrupted)) return DrainAction::kIgnore;
  if (meta != nullptr && meta->contains("deletionTimestamp")) return DrainAction::kWait;
  if (meta != nullptr) {
    if (const bj::object* ann = ObjectField(*meta, "annotations");
        ann != nullptr && (StringField(*ann, kAnnotationDoNotDisrupt) == "true" ||
                           StringField(*ann, kAnnotationTgpDoNotDisrupt) == "true"))
      return DrainAction::kHold;
  }
  return DrainAction::kEvict;
}

Result<DrainProgress> DrainStep(kube::Client& client, const kube::Object& node,
                                const std::vector<const bj::object*>& pods,
                                std::chrono::system_clock::time_point now,
                                std::optional<std::chrono::system_clock::time_point> force_after) {
  HS_RETURN_IF_ERROR(Taint(client, node));
  DrainProgress out;
  const bool force = force_after.has_value() && now >= *force_after;
  for (const bj::object* pod : pods) {
    if (pod == nullptr) continue;
    DrainAction action = ClassifyForDrain(*pod);
    if (action == DrainAction::kIgnore) continue;
    std::string key = Key(*pod);
    out.remaining.push_back(key);
    if (action == DrainAction::kWait) continue;
    std::string ns = key.substr(0, key.find('/')), name = key.substr(key.find('/') + 1);
    if (action == DrainAction::kHold && !force) {
      if (out.blocked.empty())
        out.blocked =
            "pod " + key + " has " + kAnnotationDoNotDisrupt + ": waiting for it to finish";
      continue;
    }
    if (force) {
      // Past the pool's terminationGracePeriod: deleted with its own grace period, budgets and
      // do-not-disrupt notwithstanding.
      Status d = client.Delete(kube::resources::Pods(), ns, name);
      if (!d.ok() && d.error().code != Error::Code::kNotFound) return d.error();
      ++out.evicted;
      continue;
    }
    bj::object eviction{{"apiVersion", "policy/v1"},
                        {"kind", "Eviction"},
                        {"metadata", bj::object{{"name", name}, {"namespace", ns}}}};
    std::string path = "/api/v1/namespaces/";
    path += ns;
    path += "/pods/" + name + "/eviction";
    auto resp = client.Raw("POST", path, bj::serialize(eviction));
    if (!resp.ok()) return resp.error();
    if (resp->status == 404) continue;  // gone meanwhile
    if (resp->status == 429) {
      if (out.blocked.empty())
        out.blocked = "cannot evict pod " + key + ": " + EvictionRefusal(resp->body);
      continue;
    }
    if (resp->status >= 300) return kube::ErrorFromResponse(*resp);
    ++out.evicted;
  }
  out.done = out.remaining.empty();
  return out;
}

}  // namespace hyperslice::gpu
