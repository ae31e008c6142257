// Metrics: counters, gauges and histograms with labels, exposed in the Prometheus text exposition
// format 0.0.4 (`# HELP` / `# TYPE` lines, `_bucket{le=...}` / `_sum` / `_count`).
//
// Backed by prometheus-cpp's core library (Debian 12 ships it as prometheus-cpp-dev), used only for
// its metric types and text serializer; HTTP serving is ours (src/kube/internal/health_server.h
// over net::HttpServer), so civetweb is never started. The library stays behind this header.
//
// Names and labels follow controller-runtime and client-go so dashboards written for Go
// operators work unchanged (see the constants in controller.h and internal/workqueue.h).
//
// Thread-safety: every method of Registry and of the metric handles is thread-safe. Handles are
// owned by the Registry and stay valid for its lifetime.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace hyperslice::kube::metrics {

using Labels = std::map<std::string, std::string>;

class Counter {
 public:
  virtual ~Counter() = default;
  virtual void Inc(double v = 1) = 0;  // v >= 0
  virtual double Value() const = 0;
};

class Gauge {
 public:
  virtual ~Gauge() = default;
  virtual void Set(double v) = 0;
  virtual void Add(double v) = 0;
  virtual double Value() const = 0;
};

class Histogram {
 public:
  virtual ~Histogram() = default;
  virtual void Observe(double v) = 0;
  virtual uint64_t Count() const = 0;
  virtual double Sum() const = 0;
};

// Bucket helpers with prometheus/client_golang's semantics.
std::vector<double> ExponentialBuckets(double start, double factor, int count);
std::vector<double> LinearBuckets(double start, double width, int count);
// client_golang's DefBuckets (.005 … 10).
std::vector<double> DefaultBuckets();

class Registry {
 public:
  Registry();
  ~Registry();
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // The process-wide registry served at /metrics (controller-runtime's metrics.Registry).
  static Registry& Default();

  // Returns the series `name{labels}`, creating the family (with `help`) and the series on first
  // use. A name is bound to one metric type; asking for it as another type is a programming error
  // and aborts. Histogram buckets are fixed by the first call for a name.
  Counter& GetCounter(const std::string& name, const std::string& help, const Labels& labels = {});
  Gauge& GetGauge(const std::string& name, const std::string& help, const Labels& labels = {});
  Histogram& GetHistogram(const std::string& name, const std::string& help, const Labels& labels,
                          const std::vector<double>& buckets);

  // Every family in text exposition format 0.0.4.
  std::string Expose() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// The Content-Type of Expose()'s output.
inline constexpr const char* kTextContentType = "text/plain; version=0.0.4; charset=utf-8";

}  // namespace hyperslice::kube::metrics
