#include "src/runners/controlnode/placement.h"

#include <algorithm>
#include <cctype>
#include <limits>
#include <tuple>

namespace hyperslice::runners::controlnode {
namespace {

int64_t Get(const ResourceList& l, const std::string& k) {
  auto it = l.find(k);
  return it == l.end() ? 0 : it->second;
}

bool Admits(const RunnerCandidate& r, const PodNeeds& p) {
  return (!p.host_network || r.allow_host_network) && (p.images_by_digest || !r.require_digest);
}

// Fraction of the runner left free after the pod, summed over the resources the pod requests:
// the smaller, the tighter the fit.
double Leftover(const ResourceList& need, const RunnerCandidate& r) {
  double s = 0;
  for (const auto& [k, v] : need) {
    if (v <= 0) continue;
    int64_t cap = Get(r.capacity, k);
    if (cap <= 0) continue;
    s += static_cast<double>(cap - Get(r.used, k) - v) / static_cast<double>(cap);
  }
  return s;
}

std::string Describe(const ResourceList& need) {
  std::string out;
  for (const auto& [k, v] : need) {
    if (v <= 0) continue;
    if (!out.empty()) out += ", ";
    out += k + "=";
    out += v % 1000 == 0 ? std::to_string(v / 1000) : std::to_string(v) + "m";
  }
  return out.empty() ? "nothing" : out;
}

PlacementDecision Refuse(std::string reason, std::string message, bool permanent) {
  PlacementDecision d;
  d.reason = std::move(reason);
  d.message = std::move(message);
  d.permanent = permanent;
  return d;
}

// Why nothing was chosen, given whether some runner could hold the need with nothing else on it.
PlacementDecision Explain(const PodNeeds& pod, const std::vector<RunnerCandidate>& runners,
                          const ResourceList& need, const std::string& what) {
  bool healthy_any = false, admitted_empty_fit = false, policy_blocked = false,
       unhealthy_fit = false, host_net_blocked = false;
  for (const auto& r : runners) {
    bool fits_empty = Fits(need, r.capacity, {});
    if (!r.healthy) {
      unhealthy_fit = unhealthy_fit || fits_empty;
      continue;
    }
    healthy_any = true;
    if (!fits_empty) continue;
    if (Admits(r, pod)) {
      admitted_empty_fit = true;
    } else {
      policy_blocked = true;
      host_net_blocked = host_net_blocked || (pod.host_network && !r.allow_host_network);
    }
  }
  if (admitted_empty_fit) {
    return Refuse("InsufficientRunnerCapacity",
                  "no runner has " + Describe(need) + " free now" + what + "; waiting", false);
  }
  if (policy_blocked) {
    if (host_net_blocked) {
      return Refuse("HostNetworkForbidden",
                    "the pod uses hostNetwork and every runner that could hold it forbids it",
                    true);
    }
    return Refuse("ImageNotByDigest",
                  "an image is referenced by tag and every runner that could hold the pod "
                  "requires images by digest (name@sha256:<hex>)",
                  true);
  }
  if (unhealthy_fit || !healthy_any) {
    return Refuse("NoHealthyRunner",
                  "no healthy runner can hold " + Describe(need) + what + "; waiting", false);
  }
  return Refuse("NoRunnerFits", "no runner of this control node can hold " + Describe(need) + what,
                true);
}

}  // namespace

bool Fits(const ResourceList& need, const ResourceList& capacity, const ResourceList& used) {
  for (const auto& [k, v] : need) {
    if (v <= 0) continue;
    if (Get(capacity, k) - Get(used, k) < v) return false;
  }
  return true;
}

ResourceList PerHostShare(const ResourceList& total, int hosts) {
  if (hosts <= 1) return total;
  ResourceList out;
  for (const auto& [k, v] : total) out[k] = (v + hosts - 1) / hosts;
  return out;
}

PlacementDecision Place(const PodNeeds& pod, const std::vector<RunnerCandidate>& runners) {
  if (pod.hosts <= 1) {
    const RunnerCandidate* best = nullptr;
    double best_score = std::numeric_limits<double>::max();
    for (const auto& r : runners) {
      if (!r.healthy || !Admits(r, pod) || !Fits(pod.requests, r.capacity, r.used)) continue;
      double s = Leftover(pod.requests, r);
      if (best == nullptr || s < best_score || (s == best_score && r.name < best->name)) {
        best = &r;
        best_score = s;
      }
    }
    if (best != nullptr) {
      PlacementDecision d;
      d.runners = {best->name};
      return d;
    }
    return Explain(pod, runners, pod.requests, "");
  }

  // A whole slice: `hosts` runners of one slice, each holding an even share.
  ResourceList share = PerHostShare(pod.requests, pod.hosts);
  std::map<std::string, std::vector<const RunnerCandidate*>> slices;
  for (const auto& r : runners) {
    if (!r.slice.empty()) slices[r.slice].push_back(&r);
  }
  std::vector<const RunnerCandidate*> chosen;
  std::tuple<double, std::string> best_key{std::numeric_limits<double>::max(), ""};
  bool could_ever = false, policy_blocked = false;
  for (auto& [slice, members] : slices) {
    std::sort(members.begin(), members.end(),
              [](const auto* a, const auto* b) { return a->slice_index < b->slice_index; });
    std::vector<const RunnerCandidate*> ready;
    int fit_empty = 0, admitted_fit_empty = 0;
    double score = 0;
    for (const auto* r : members) {
      if (!Fits(share, r->capacity, {})) continue;
      ++fit_empty;
      if (Admits(*r, pod)) ++admitted_fit_empty;
      if (r->healthy && Admits(*r, pod) && Fits(share, r->capacity, r->used) &&
          static_cast<int>(ready.size()) < pod.hosts) {
        ready.push_back(r);
        score += Leftover(share, *r);
      }
    }
    if (fit_empty >= pod.hosts && admitted_fit_empty < pod.hosts) policy_blocked = true;
    if (admitted_fit_empty >= pod.hosts) could_ever = true;
    if (static_cast<int>(ready.size()) == pod.hosts) {
      std::tuple<double, std::string> key{score, slice};
      if (chosen.empty() || key < best_key) {
        chosen = ready;
        best_key = key;
      }
    }
  }
  if (!chosen.empty()) {
    PlacementDecision d;
    for (const auto* r : chosen) d.runners.push_back(r->name);
    return d;
  }
  std::string what = " on each of " + std::to_string(pod.hosts) + " hosts of one slice";
  if (could_ever) {
    return Refuse("InsufficientRunnerCapacity",
                  "no slice has " + std::to_string(pod.hosts) + " healthy hosts with " +
                      Describe(share) + " free now; waiting",
                  false);
  }
  if (policy_blocked) {
    return Refuse(pod.host_network ? "HostNetworkForbidden" : "ImageNotByDigest",
                  pod.host_network
                      ? "the pod uses hostNetwork and the slices that could hold it forbid it"
                      : "an image is referenced by tag and the slices that could hold the pod "
                        "require images by digest (name@sha256:<hex>)",
                  true);
  }
  return Refuse("NoRunnerFits",
                "no slice of this control node has " + std::to_string(pod.hosts) +
                    " hosts that can each hold " + Describe(share),
                true);
}

bool IsDigestReference(const std::string& image) {
  auto at = image.rfind("@sha256:");
  if (at == std::string::npos || at == 0) return false;
  std::string hex = image.substr(at + 8);
  if (hex.size() != 64) return false;
  return std::all_of(hex.begin(), hex.end(), [](char c) {
    return std::isdigit(static_cast<unsigned char>(c)) != 0 || (c >= 'a' && c <= 'f');
  });
}

}  // namespace hyperslice::runners::controlnode
