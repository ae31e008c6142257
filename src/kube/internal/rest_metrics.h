// RestMetrics: process-wide counters of the REST client's requests, for rendering client-go's
//   rest_client_requests_total{code,method,host}
//   rest_client_request_duration_seconds{verb,host}  (histogram, client-go's buckets)
// by the metrics endpoint. The Client calls Observe() once per HTTP exchange (a watch counts when
// its headers arrive); code is the HTTP status as text, or "<error>" for a transport failure, as
// client-go reports it.
//
// Thread-safe; Observe() takes one short mutex.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace hyperslice::kube {

class RestMetrics {
 public:
  struct RequestCount {
    std::string code, method, host;
    uint64_t count = 0;
  };
  struct Latency {
    std::string verb, host;
    std::vector<uint64_t> bucket_counts;  // cumulative, one per Buckets() bound (le)
    uint64_t count = 0;                   // also the +Inf bucket
    double sum = 0;
  };
  struct Snapshot {
    std::vector<RequestCount> requests;  // sorted by (code, method, host)
    std::vector<Latency> latencies;      // sorted by (verb, host)
  };

  static void Observe(std::string_view method, std::string_view code, std::string_view host,
                      double seconds);
  static Snapshot Take();
  // Upper bounds of the latency histogram's buckets, in seconds (client-go's).
  static const std::vector<double>& Buckets();
  // Clears everything (tests).
  static void Reset();
};

}  // namespace hyperslice::kube
