#include "src/kube/internal/rest_metrics.h"

#include <map>
#include <mutex>
#include <tuple>

namespace hyperslice::kube {
namespace {

struct LatencyData {
  std::vector<uint64_t> buckets;  // non-cumulative while stored
  uint64_t count = 0;
  double sum = 0;
};

struct State {
  std::mutex mu;
  std::map<std::tuple<std::string, std::string, std::string>, uint64_t> requests;
  std::map<std::pair<std::string, std::string>, LatencyData> latencies;
};

State& GetState() {
  static State* s = new State();  // never destroyed: observed from threads during exit
  return *s;
}

}  // namespace

const std::vector<double>& RestMetrics::Buckets() {
  static const std::vector<double> b = {0.005, 0.025, 0.1, 0.25, 0.5,  1.0,
                                        2.0,   4.0,   8.0, 15.0, 30.0, 60.0};
  return b;
}

void RestMetrics::Observe(std::string_view method, std::string_view code, std::string_view host,
                          double seconds) {
  const auto& bounds = Buckets();
  State& s = GetState();
  std::lock_guard<std::mutex> lock(s.mu);
  ++s.requests[{std::string(code), std::string(method), std::string(host)}];
  auto& l = s.latencies[{std::string(method), std::string(host)}];
  if (l.buckets.empty()) l.buckets.assign(bounds.size(), 0);
  for (size_t i = 0; i < bounds.size(); ++i) {
    if (seconds <= bounds[i]) {
      ++l.buckets[i];
      break;
    }
  }
  ++l.count;
  l.sum += seconds;
}

RestMetrics::Snapshot RestMetrics::Take() {
  State& s = GetState();
  std::lock_guard<std::mutex> lock(s.mu);
  Snapshot snap;
  for (const auto& [key, n] : s.requests) {
    snap.requests.push_back({std::get<0>(key), std::get<1>(key), std::get<2>(key), n});
  }
  for (const auto& [key, l] : s.latencies) {
    Latency out;
    out.verb = key.first;
    out.host = key.second;
    uint64_t acc = 0;
    for (uint64_t b : l.buckets) {
      acc += b;
      out.bucket_counts.push_back(acc);
    }
    out.count = l.count;
    out.sum = l.sum;
    snap.latencies.push_back(std::move(out));
  }
  return snap;
}

void RestMetrics::Reset() {
  State& s = GetState();
  std::lock_guard<std::mutex> lock(s.mu);
  s.requests.clear();
  s.latencies.clear();
}

}  // namespace hyperslice::kube
