#include "src/kube/internal/health_server.h"

#include <charconv>

#include "src/kube/internal/rest_metrics.h"
#include "src/net/server.h"

namespace hyperslice::kube {
namespace {

void ServeChecks(const net::ServerRequest& req, const std::shared_ptr<net::Responder>& resp,
                 const std::string& endpoint, const std::vector<NamedCheck>& checks) {
  const net::Headers text{{"Content-Type", "text/plain; charset=utf-8"},
                          {"X-Content-Type-Options", "nosniff"}};
  // /healthz/<name>: one check.
  std::string only;
  if (req.path.size() > endpoint.size() + 1) only = req.path.substr(endpoint.size() + 1);
  const bool verbose = req.query.count("verbose") > 0;
  std::string body;
  bool failed = false;
  bool found = only.empty();
  for (const auto& [name, check] : checks) {
    if (!only.empty() && name != only) continue;
    found = true;
    Status s = check ? check() : OkStatus();
    if (s.ok()) {
      body += "[+]" + name + " ok\n";
    } else {
      failed = true;
      body += "[-]" + name + " failed: " + s.error().message + "\n";
    }
  }
  if (!found) {
    resp->Send(404, "no such check: " + only + "\n", text);
    return;
  }
  std::string what = endpoint.substr(1);
  if (failed) {
    resp->Send(500, body + what + " check failed\n", text);
  } else if (verbose) {
    resp->Send(200, body + what + " check passed\n", text);
  } else {
    resp->Send(200, "ok", text);
  }
}

std::string Number(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc() ? std::string(buf, end) : std::string("NaN");
}

std::string Escape(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

// client-go's REST client metrics, kept by the REST client in RestMetrics (process-wide).
std::string RenderRestMetrics() {
  auto snap = RestMetrics::Take();
  std::string out =
      "# HELP rest_client_requests_total Number of HTTP requests, partitioned by status code, "
      "method, and host.\n# TYPE rest_client_requests_total counter\n";
  for (const auto& r : snap.requests) {
    out += "rest_client_requests_total{code=\"" + Escape(r.code) + "\",host=\"" + Escape(r.host) +
           "\",method=\"" + Escape(r.method) + "\"} " + std::to_string(r.count) + "\n";
  }
  out +=
      "# HELP rest_client_request_duration_seconds Request latency in seconds. Broken down by "
      "verb, and host.\n# TYPE rest_client_request_duration_seconds histogram\n";
  const auto& bounds = RestMetrics::Buckets();
  for (const auto& l : snap.latencies) {
    std::string labels = "host=\"" + Escape(l.host) + "\",verb=\"" + Escape(l.verb) + "\"";
    for (size_t i = 0; i < bounds.size() && i < l.bucket_counts.size(); ++i) {
      out += "rest_client_request_duration_seconds_bucket{" + labels + ",le=\"" +
             Number(bounds[i]) + "\"} " + std::to_string(l.bucket_counts[i]) + "\n";
    }
    out += "rest_client_request_duration_seconds_bucket{" + labels + ",le=\"+Inf\"} " +
           std::to_string(l.count) + "\n";
    out += "rest_client_request_duration_seconds_sum{" + labels + "} " + Number(l.sum) + "\n";
    out += "rest_client_request_duration_seconds_count{" + labels + "} " + std::to_string(l.count) +
           "\n";
  }
  return out;
}

}  // namespace

Result<std::unique_ptr<HealthServer>> HealthServer::Start(HealthServerOptions options) {
  auto* registry = options.registry ? options.registry : &metrics::Registry::Default();
  auto healthz = options.healthz;
  auto readyz = options.readyz;
  net::HttpServer::Options so;
  so.address = options.address;
  so.port = options.port;
  so.threads = 1;
  auto handler = [registry, healthz, readyz](const net::ServerRequest& req,
                                             std::shared_ptr<net::Responder> resp) {
    if (req.method != "GET" && req.method != "HEAD") {
      resp->Send(405, "method not allowed\n", {{"Allow", "GET, HEAD"}});
      return;
    }
    auto under = [&](const std::string& p) {
      return req.path == p || req.path.rfind(p + "/", 0) == 0;
    };
    if (under("/healthz")) {
      ServeChecks(req, resp, "/healthz", healthz ? healthz() : std::vector<NamedCheck>{});
    } else if (under("/readyz")) {
      ServeChecks(req, resp, "/readyz", readyz ? readyz() : std::vector<NamedCheck>{});
    } else if (req.path == "/metrics") {
      resp->Send(200, registry->Expose() + RenderRestMetrics(),
                 {{"Content-Type", metrics::kTextContentType}});
    } else {
      resp->Send(404, "not found\n", {{"Content-Type", "text/plain; charset=utf-8"}});
    }
  };
  HS_ASSIGN_OR_RETURN(auto server, net::HttpServer::Start(so, handler));
  std::unique_ptr<HealthServer> hs(new HealthServer());
  hs->server_ = std::move(server);
  return hs;
}

HealthServer::~HealthServer() { Stop(); }

uint16_t HealthServer::port() const { return server_ ? server_->port() : 0; }

void HealthServer::Stop() {
  if (server_) server_->Stop(std::chrono::milliseconds(1000));
}

}  // namespace hyperslice::kube
