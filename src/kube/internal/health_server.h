// HealthServer: the probe and metrics endpoints of a process, on net::HttpServer.
//
//   GET /healthz, /readyz  → 200 "ok" when every check passes; 500 naming the failing checks.
//       ?verbose lists every check ("[+]name ok" / "[-]name failed: reason"), like
//       controller-runtime's healthz handler. /healthz/<name> and /readyz/<name> run one check.
//   GET /metrics           → the registry in Prometheus text format 0.0.4, followed by the REST
//                            client's rest_client_requests_total and
//                            rest_client_request_duration_seconds (rest_metrics.h).
//
// Thread-safety: checks run on the server's I/O thread and must be quick and thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "src/base/result.h"
#include "src/kube/metrics.h"

namespace hyperslice::net {
class HttpServer;
}

namespace hyperslice::kube {

using NamedCheck = std::pair<std::string, std::function<Status()>>;

struct HealthServerOptions {
  std::string address = "127.0.0.1";
  uint16_t port = 0;                                 // 0 picks a free port
  std::function<std::vector<NamedCheck>()> healthz;  // the checks, read per request
  std::function<std::vector<NamedCheck>()> readyz;
  metrics::Registry* registry = nullptr;  // default metrics::Registry::Default()
};

class HealthServer {
 public:
  static Result<std::unique_ptr<HealthServer>> Start(HealthServerOptions options);
  ~HealthServer();
  uint16_t port() const;
  void Stop();

 private:
  HealthServer() = default;
  std::unique_ptr<net::HttpServer> server_;
};

}  // namespace hyperslice::kube
