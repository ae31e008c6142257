#include "src/kube/metrics.h"

#include <cmath>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include "src/base/log.h"

namespace hyperslice::kube::metrics {
namespace {

class CounterImpl final : public Counter {
 public:
  explicit CounterImpl(prometheus::Counter* c) : c_(c) {}
  void Inc(double v) override { c_->Increment(v); }
  double Value() const override { return c_->Value(); }

 private:
  prometheus::Counter* c_;
};

class GaugeImpl final : public Gauge {
 public:
  explicit GaugeImpl(prometheus::Gauge* g) : g_(g) {}
  void Set(double v) override { g_->Set(v); }
  void Add(double v) override { g_->Increment(v); }
  double Value() const override { return g_->Value(); }

 private:
  prometheus::Gauge* g_;
};

class HistogramImpl final : public Histogram {
 public:
  explicit HistogramImpl(prometheus::Histogram* h) : h_(h) {}
  void Observe(double v) override { h_->Observe(v); }
  uint64_t Count() const override { return h_->Collect().histogram.sample_count; }
  double Sum() const override { return h_->Collect().histogram.sample_sum; }

 private:
  prometheus::Histogram* h_;
};

[[noreturn]] void Die(const std::string& what) {
  log::Error("metrics: programming error", {{"error", what}});
  std::abort();
}

std::string SeriesKey(const std::string& name, const Labels& labels) {
  std::string k = name;
  for (const auto& [n, v] : labels) {
    k += '\x1f';
    k += n;
    k += '=';
    k += v;
  }
  return k;
}

}  // namespace

struct Registry::Impl {
  std::mutex mu;
  prometheus::Registry registry;
  std::unordered_map<std::string, prometheus::Family<prometheus::Counter>*> counters;
  std::unordered_map<std::string, prometheus::Family<prometheus::Gauge>*> gauges;
  std::unordered_map<std::string, prometheus::Family<prometheus::Histogram>*> histograms;
  std::unordered_map<std::string, std::vector<double>> buckets;
  // Our handles, keyed by name+labels, so repeated lookups return the same object.
  std::unordered_map<std::string, std::unique_ptr<Counter>> counter_handles;
  std::unordered_map<std::string, std::unique_ptr<Gauge>> gauge_handles;
  std::unordered_map<std::string, std::unique_ptr<Histogram>> histogram_handles;

  void CheckUnused(const std::string& name, const char* as) {
    int uses = static_cast<int>(counters.count(name) + gauges.count(name) + histograms.count(name));
    if (uses != 0) Die("metric " + name + " already registered with another type than " + as);
  }
};

Registry::Registry() : impl_(std::make_unique<Impl>()) {}
Registry::~Registry() = default;

Registry& Registry::Default() {
  static auto* registry = new Registry();  // never destroyed: handles outlive static destructors
  return *registry;
}

Counter& Registry::GetCounter(const std::string& name, const std::string& help,
                              const Labels& labels) {
  std::lock_guard lock(impl_->mu);
  auto key = SeriesKey(name, labels);
  if (auto it = impl_->counter_handles.find(key); it != impl_->counter_handles.end()) {
    return *it->second;
  }
  try {
    auto fam = impl_->counters.find(name);
    if (fam == impl_->counters.end()) {
      impl_->CheckUnused(name, "counter");
      auto& f = prometheus::BuildCounter().Name(name).Help(help).Register(impl_->registry);
      fam = impl_->counters.emplace(name, &f).first;
    }
    auto& c = fam->second->Add({labels.begin(), labels.end()});
    auto& h = impl_->counter_handles[key];
    h = std::make_unique<CounterImpl>(&c);
    return *h;
  } catch (const std::exception& e) {
    Die("counter " + name + ": " + e.what());
  }
}

Gauge& Registry::GetGauge(const std::string& name, const std::string& help, const Labels& labels) {
  std::lock_guard lock(impl_->mu);
  auto key = SeriesKey(name, labels);
  if (auto it = impl_->gauge_handles.find(key); it != impl_->gauge_handles.end()) {
    return *it->second;
  }
  try {
    auto fam = impl_->gauges.find(name);
    if (fam == impl_->gauges.end()) {
      impl_->CheckUnused(name, "gauge");
      auto& f = prometheus::BuildGauge().Name(name).Help(help).Register(impl_->registry);
      fam = impl_->gauges.emplace(name, &f).first;
    }
    auto& g = fam->second->Add({labels.begin(), labels.end()});
    auto& h = impl_->gauge_handles[key];
    h = std::make_unique<GaugeImpl>(&g);
    return *h;
  } catch (const std::exception& e) {
    Die("gauge " + name + ": " + e.what());
  }
}

Histogram& Registry::GetHistogram(const std::string& name, const std::string& help,
                                  const Labels& labels, const std::vector<double>& buckets) {
  std::lock_guard lock(impl_->mu);
  auto key = SeriesKey(name, labels);
  if (auto it = impl_->histogram_handles.find(key); it != impl_->histogram_handles.end()) {
    return *it->second;
  }
  try {
    auto fam = impl_->histograms.find(name);
    if (fam == impl_->histograms.end()) {
      impl_->CheckUnused(name, "histogram");
      auto& f = prometheus::BuildHistogram().Name(name).Help(help).Register(impl_->registry);
      fam = impl_->histograms.emplace(name, &f).first;
      impl_->buckets[name] = buckets;
    }
    auto& hist = fam->second->Add({labels.begin(), labels.end()}, impl_->buckets[name]);
    auto& h = impl_->histogram_handles[key];
    h = std::make_unique<HistogramImpl>(&hist);
    return *h;
  } catch (const std::exception& e) {
    Die("histogram " + name + ": " + e.what());
  }
}

std::string Registry::Expose() const {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, impl_->registry.Collect());
  return out.str();
}

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  std::vector<double> b;
  double v = start;
  for (int i = 0; i < count; ++i, v *= factor) b.push_back(v);
  return b;
}

std::vector<double> LinearBuckets(double start, double width, int count) {
  std::vector<double> b;
  for (int i = 0; i < count; ++i) b.push_back(start + width * i);
  return b;
}

std::vector<double> DefaultBuckets() { return {.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}; }

}  // namespace hyperslice::kube::metrics
