#include "src/deviceplugin/allocation.h"

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <set>
#include <tuple>
#include <unordered_map>

namespace hyperslice::deviceplugin {
namespace {

// Lower is better: (NUMA nodes spanned, holes in the index range, lowest index, indices).
using Score = std::tuple<int, int, int, std::vector<int>>;

Score ScoreOf(const std::vector<const Candidate*>& pick) {
  std::set<int> numa;
  std::vector<int> indices;
  for (const Candidate* c : pick) {
    numa.insert(c->numa_node);
    indices.push_back(c->index);
  }
  std::sort(indices.begin(), indices.end());
  int holes =
      indices.empty() ? 0 : indices.back() - indices.front() + 1 - static_cast<int>(indices.size());
  int lowest = indices.empty() ? 0 : indices.front();
  return {static_cast<int>(numa.size()), holes, lowest, indices};
}

// Exact: every way to add `need` chips of `free` to `base`.
void Search(const std::vector<const Candidate*>& free, size_t start, int need,
            std::vector<const Candidate*>& current, std::optional<Score>& best,
            std::vector<const Candidate*>& best_pick) {
  if (need == 0) {
    Score s = ScoreOf(current);
    if (!best || s < *best) {
      best = std::move(s);
      best_pick = current;
    }
    return;
  }
  for (size_t i = start; i + static_cast<size_t>(need) <= free.size(); ++i) {
    current.push_back(free[i]);
    Search(free, i + 1, need - 1, current, best, best_pick);
    current.pop_back();
  }
}

// Greedy for large hosts: fill from the NUMA node that already holds the most picked chips (or
// the one with the most free chips), nearest index first.
void Greedy(std::vector<const Candidate*> free, int need, std::vector<const Candidate*>& pick) {
  while (need > 0 && !free.empty()) {
    std::unordered_map<int, int> weight;
    for (const Candidate* c : pick) weight[c->numa_node] += 1000;
    for (const Candidate* c : free) weight[c->numa_node] += 1;
    int anchor = pick.empty() ? -1 : pick.front()->index;
    auto better = [&](const Candidate* a, const Candidate* b) {
      if (weight[a->numa_node] != weight[b->numa_node]) {
        return weight[a->numa_node] > weight[b->numa_node];
      }
      int da = anchor < 0 ? a->index : std::abs(a->index - anchor);
      int db = anchor < 0 ? b->index : std::abs(b->index - anchor);
      if (da != db) return da < db;
      return a->index < b->index;
    };
    auto it = std::min_element(free.begin(), free.end(), better);
    pick.push_back(*it);
    free.erase(it);
    --need;
  }
}

}  // namespace

Result<std::vector<std::string>> ChoosePreferred(const std::vector<Candidate>& available,
                                                 const std::vector<std::string>& must_include,
                                                 int size) {
  if (size <= 0 || size > static_cast<int>(available.size())) {
    return Error::Make(Error::Code::kInvalidArgument,
                       "allocation size " + std::to_string(size) + " is outside 1.." +
                           std::to_string(available.size()) + " available devices");
  }
  std::unordered_map<std::string, const Candidate*> by_id;
  for (const Candidate& c : available) by_id[c.id] = &c;
  std::vector<const Candidate*> pick;
  std::set<std::string> picked;
  for (const std::string& id : must_include) {
    auto it = by_id.find(id);
    if (it == by_id.end()) {
      return Error::Make(Error::Code::kInvalidArgument,
                         "must-include device \"" + id + "\" is not among the available devices");
    }
    if (picked.insert(id).second) pick.push_back(it->second);
  }
  if (static_cast<int>(pick.size()) > size) {
    return Error::Make(Error::Code::kInvalidArgument,
                       std::to_string(pick.size()) +
                           " must-include devices exceed allocation size " + std::to_string(size));
  }
  std::vector<const Candidate*> free;
  for (const Candidate& c : available) {
    if (!picked.count(c.id)) free.push_back(&c);
  }
  std::sort(free.begin(), free.end(),
            [](const Candidate* a, const Candidate* b) { return a->index < b->index; });
  int need = size - static_cast<int>(pick.size());
  if (free.size() <= 16) {
    std::optional<Score> best;
    std::vector<const Candidate*> best_pick;
    std::vector<const Candidate*> current = pick;
    Search(free, 0, need, current, best, best_pick);
    pick = std::move(best_pick);
  } else {
    Greedy(std::move(free), need, pick);
  }
  std::sort(pick.begin(), pick.end(),
            [](const Candidate* a, const Candidate* b) { return a->index < b->index; });
  std::vector<std::string> ids;
  ids.reserve(pick.size());
  for (const Candidate* c : pick) ids.push_back(c->id);
  return ids;
}

std::map<std::string, std::string> TpuEnv(std::vector<int> chip_indices, int host_chips) {
  std::sort(chip_indices.begin(), chip_indices.end());
  std::map<std::string, std::string> env;
  std::string visible;
  for (int i : chip_indices) {
    if (!visible.empty()) visible += ',';
    visible += std::to_string(i);
  }
  env["TPU_VISIBLE_CHIPS"] = visible;
  int n = static_cast<int>(chip_indices.size());
  if (n == host_chips) return env;
  const char* bounds = nullptr;
  switch (n) {
    case 1:
      bounds = "1,1,1";
      break;
    case 2:
      bounds = "1,2,1";
      break;
    case 4:
      bounds = "2,2,1";
      break;
    case 8:
      bounds = "2,4,1";
      break;
    default:
      break;
  }
  if (bounds != nullptr) {
    env["TPU_CHIPS_PER_PROCESS_BOUNDS"] = bounds;
    env["TPU_PROCESS_BOUNDS"] = "1,1,1";
  }
  return env;
}

}  // namespace hyperslice::deviceplugin
