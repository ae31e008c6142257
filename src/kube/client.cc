// The REST client over net::HttpClient. See client.h for the contract.
#include "src/kube/client.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <mutex>
#include <thread>
#include <utility>

#include <boost/json.hpp>

#include "src/base/json.h"
#include "src/base/log.h"
#include "src/kube/internal/rest_metrics.h"
#include "src/kube/internal/watch_decoder.h"
#include "src/net/status.h"

namespace hyperslice::kube {
namespace {

namespace json = boost::json;

constexpr std::chrono::milliseconds kRequestTimeout{60000};
constexpr size_t kMaxErrorBody = 1 << 20;

bool Is2xx(int status) { return status >= 200 && status < 300; }

std::string HostOf(const std::string& server) {
  std::string h = server;
  if (auto p = h.find("://"); p != std::string::npos) h = h.substr(p + 3);
  if (auto p = h.find('/'); p != std::string::npos) h = h.substr(0, p);
  return h;
}

void AddParam(std::string& q, const char* key, const std::string& value) {
  if (value.empty()) return;
  q += q.empty() ? '?' : '&';
  q += key;
  q += '=';
  q += net::UrlEncode(value);
}

std::string ListQuery(const ListOptions& o, bool watch) {
  std::string q;
  if (watch) AddParam(q, "watch", "1");
  AddParam(q, "labelSelector", o.label_selector);
  AddParam(q, "fieldSelector", o.field_selector);
  if (o.limit > 0) AddParam(q, "limit", std::to_string(o.limit));
  AddParam(q, "continue", o.continue_token);
  AddParam(q, "resourceVersion", o.resource_version);
  AddParam(q, "resourceVersionMatch", o.resource_version_match);
  if (watch) {
    if (o.timeout_seconds) AddParam(q, "timeoutSeconds", std::to_string(*o.timeout_seconds));
    if (o.allow_watch_bookmarks) AddParam(q, "allowWatchBookmarks", "true");
    if (o.send_initial_events) AddParam(q, "sendInitialEvents", "true");
  }
  return q;
}

std::string Truncate(std::string_view s, size_t n) {
  std::string out(s.substr(0, n));
  if (s.size() > n) out += "...";
  return out;
}

Result<json::object> ParseObject(const std::string& body, const std::string& what) {
  boost::system::error_code ec;
  json::value v = json::parse(body, ec);
  if (ec || !v.is_object()) {
    return Error::Make(Error::Code::kInternal,
                       what + ": response is not a JSON object: " + Truncate(body, 200));
  }
  return std::move(v.get_object());
}

std::string MetadataString(const Object& obj, const char* key) {
  return std::string(jsonfield::StringField(jsonfield::ObjectField(obj, "metadata"), key));
}

// Client-side rate limit: a token bucket whose balance may go negative (a reservation), so waiting
// callers are served in arrival order of their reservations.
class TokenBucket {
 public:
  TokenBucket(double qps, int burst)
      : rate_(qps),
        burst_(std::max(1.0, burst > 0 ? burst : std::ceil(qps))),
        tokens_(burst_),
        last_(std::chrono::steady_clock::now()) {}
  void Wait() {
    std::chrono::duration<double> wait{0};
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto now = std::chrono::steady_clock::now();
      tokens_ =
          std::min(burst_, tokens_ + rate_ * std::chrono::duration<double>(now - last_).count());
      last_ = now;
      tokens_ -= 1;
      if (tokens_ < 0) wait = std::chrono::duration<double>(-tokens_ / rate_);
    }
    if (wait.count() > 0) std::this_thread::sleep_for(wait);
  }

 private:
  std::mutex mu_;
  double rate_, burst_, tokens_;
  std::chrono::steady_clock::time_point last_;
};

class WatchStreamImpl : public WatchStream {
 public:
  WatchStreamImpl(std::unique_ptr<net::ResponseStream> stream, size_t max_event_bytes)
      : stream_(std::move(stream)), decoder_(max_event_bytes) {}

  Result<std::optional<WatchEvent>> Next() override {
    while (true) {
      if (cancelled_) return Error::Make(Error::Code::kCancelled, "watch cancelled");
      if (auto ev = decoder_.Pop()) return std::optional<WatchEvent>(std::move(*ev));
      if (ended_) return std::optional<WatchEvent>();
      auto chunk = stream_->Next();
      if (!chunk.ok()) {
        if (cancelled_ || chunk.error().code == Error::Code::kCancelled) {
          return Error::Make(Error::Code::kCancelled, "watch cancelled");
        }
        Error e = chunk.error();
        e.code = Error::Code::kUnavailable;
        e.message = "watch stream broken after " + std::to_string(decoder_.events_decoded()) +
                    " events: " + e.message;
        return e;
      }
      if (chunk->empty()) {
        HS_RETURN_IF_ERROR(decoder_.Finish());
        ended_ = true;
        continue;
      }
      HS_RETURN_IF_ERROR(decoder_.Feed(*chunk));
    }
  }

  void Cancel() override {
    cancelled_ = true;
    stream_->Cancel();
  }

 private:
  std::unique_ptr<net::ResponseStream> stream_;
  WatchDecoder decoder_;
  std::atomic<bool> cancelled_{false};
  bool ended_ = false;
};

class ClientImpl : public Client {
 public:
  ClientImpl(Config config, std::shared_ptr<net::HttpClient> http)
      : config_(std::move(config)),
        creds_(config_),
        host_(HostOf(config_.server)),
        http_(std::move(http)) {
    if (config_.qps > 0) limiter_ = std::make_unique<TokenBucket>(config_.qps, config_.burst);
  }

  const Config& config() const override { return config_; }

  Result<Object> Get(const Resource& r, const std::string& ns, const std::string& name,
                     const std::string& subresource) override {
    std::string path = r.ObjectPath(ns, name);
    if (!subresource.empty()) path += "/" + subresource;
    return ObjectCall("GET", path, "", "");
  }

  Result<ObjectList> List(const Resource& r, const std::string& ns,
                          const ListOptions& opts) override {
    HS_ASSIGN_OR_RETURN(auto resp,
                        Send("GET", r.CollectionPath(ns) + ListQuery(opts, false), "", ""));
    if (!Is2xx(resp.status)) return ErrorFromResponse(resp);
    HS_ASSIGN_OR_RETURN(auto body, ParseObject(resp.body, "list " + r.String()));
    ObjectList out;
    if (auto* md = body.if_contains("metadata"); md != nullptr && md->is_object()) {
      const auto& m = md->get_object();
      if (auto* rv = m.if_contains("resourceVersion"); rv != nullptr && rv->is_string()) {
        out.resource_version = rv->get_string();
      }
      if (auto* c = m.if_contains("continue"); c != nullptr && c->is_string()) {
        out.continue_token = c->get_string();
      }
    }
    // List items carry no apiVersion/kind; fill them in as client-go's unstructured list does.
    std::string kind = r.kind;
    if (auto* k = body.if_contains("kind"); k != nullptr && k->is_string()) {
      std::string_view lk = k->get_string();
      if (lk.size() > 4 && lk.substr(lk.size() - 4) == "List") kind = lk.substr(0, lk.size() - 4);
    }
    std::string api_version = r.ApiVersion();
    if (auto* items = body.if_contains("items"); items != nullptr && items->is_array()) {
      out.items.reserve(items->get_array().size());
      for (auto& item : items->get_array()) {
        if (!item.is_object()) continue;
        auto& o = item.get_object();
        if (!o.contains("apiVersion")) o["apiVersion"] = api_version;
        if (!o.contains("kind") && !kind.empty()) o["kind"] = kind;
        out.items.push_back(std::move(o));
      }
    }
    return out;
  }

  Result<ObjectList> ListAll(const Resource& r, const std::string& ns, ListOptions opts) override {
    HS_ASSIGN_OR_RETURN(ObjectList all, List(r, ns, opts));
    std::string token = all.continue_token;
    all.continue_token.clear();
    while (!token.empty()) {
      ListOptions next = opts;
      next.continue_token = token;
      next.resource_version.clear();  // the continue token pins the snapshot
      next.resource_version_match.clear();
      auto page = List(r, ns, next);
      if (!page.ok() && page.error().code == Error::Code::kGone) {
        // The continue token expired (compaction): fall back to one unpaged list, like client-go's
        // pager.
        log::Info("paged list expired, relisting without paging", {{"resource", r.String()}});
        ListOptions full = opts;
        full.limit = 0;
        full.continue_token.clear();
        HS_ASSIGN_OR_RETURN(ObjectList whole, List(r, ns, full));
        whole.continue_token.clear();
        return whole;
      }
      if (!page.ok()) return page.error();
      for (auto& item : page->items) all.items.push_back(std::move(item));
      token = page->continue_token;
    }
    return all;
  }

  Result<Object> Create(const Resource& r, const std::string& ns, const Object& obj) override {
    Object body = obj;
    if (!body.contains("apiVersion")) body["apiVersion"] = r.ApiVersion();
    if (!body.contains("kind") && !r.kind.empty()) body["kind"] = r.kind;
    std::string use_ns = ns.empty() ? MetadataString(obj, "namespace") : ns;
    return ObjectCall("POST", r.CollectionPath(use_ns), json::serialize(body), "application/json");
  }

  Result<Object> Update(const Resource& r, const std::string& ns, const Object& obj,
                        const std::string& subresource) override {
    std::string name = MetadataString(obj, "name");
    if (name.empty()) {
      return Error::Make(Error::Code::kInvalidArgument,
                         "update " + r.String() + ": object has no metadata.name");
    }
    Object body = obj;
    if (!body.contains("apiVersion")) body["apiVersion"] = r.ApiVersion();
    if (!body.contains("kind") && !r.kind.empty()) body["kind"] = r.kind;
    std::string use_ns = ns.empty() ? MetadataString(obj, "namespace") : ns;
    std::string path = r.ObjectPath(use_ns, name);
    if (!subresource.empty()) path += "/" + subresource;
    return ObjectCall("PUT", path, json::serialize(body), "application/json");
  }

  Result<Object> Patch(const Resource& r, const std::string& ns, const std::string& name,
                       PatchType type, const std::string& body, const PatchOptions& opts) override {
    const char* content_type = "application/merge-patch+json";
    switch (type) {
      case PatchType::kMerge:
        break;
      case PatchType::kJson:
        content_type = "application/json-patch+json";
        break;
      case PatchType::kStrategicMerge:
        content_type = "application/strategic-merge-patch+json";
        break;
      case PatchType::kApply:
        content_type = "application/apply-patch+yaml";
        if (opts.field_manager.empty()) {
          return Error::Make(
              Error::Code::kInvalidArgument,
              "server-side apply of " + r.String() + " " + name + " needs a field manager");
        }
        break;
    }
    std::string path = r.ObjectPath(ns, name);
    if (!opts.subresource.empty()) path += "/" + opts.subresource;
    std::string q;
    AddParam(q, "fieldManager", opts.field_manager);
    if (type == PatchType::kApply && opts.force) AddParam(q, "force", "true");
    return ObjectCall("PATCH", path + q, body, content_type);
  }

  Status Delete(const Resource& r, const std::string& ns, const std::string& name,
                const DeleteOptions& opts) override {
    json::object body;
    body["kind"] = "DeleteOptions";
    body["apiVersion"] = "v1";
    if (!opts.propagation_policy.empty()) body["propagationPolicy"] = opts.propagation_policy;
    if (opts.grace_period_seconds) body["gracePeriodSeconds"] = *opts.grace_period_seconds;
    if (opts.precondition_uid || opts.precondition_resource_version) {
      json::object pre;
      if (opts.precondition_uid) pre["uid"] = *opts.precondition_uid;
      if (opts.precondition_resource_version) {
        pre["resourceVersion"] = *opts.precondition_resource_version;
      }
      body["preconditions"] = std::move(pre);
    }
    HS_ASSIGN_OR_RETURN(auto resp, Send("DELETE", r.ObjectPath(ns, name), json::serialize(body),
                                        "application/json"));
    if (!Is2xx(resp.status)) return ErrorFromResponse(resp);
    return OkStatus();
  }

  Result<std::unique_ptr<WatchStream>> Watch(const Resource& r, const std::string& ns,
                                             const ListOptions& opts) override {
    std::string target = r.CollectionPath(ns) + ListQuery(opts, true);
    // Without timeoutSeconds the apiserver ends a watch after 30-60 minutes; allow slack for a
    // quiet stream beyond the server's own timeout before calling it dead.
    auto idle = std::chrono::seconds(opts.timeout_seconds ? *opts.timeout_seconds + 30 : 3660);
    for (int attempt = 0;; ++attempt) {
      if (limiter_) limiter_->Wait();
      HS_ASSIGN_OR_RETURN(auto http, Http());
      HS_ASSIGN_OR_RETURN(auto auth, creds_.AuthorizationHeader());
      net::Request req = MakeRequest("GET", target, "", "", auth);
      auto start = std::chrono::steady_clock::now();
      auto stream = http->Stream(req, idle);
      // client-go counts a watch as the GET it is, when its response headers arrive.
      Observe("GET", stream.ok() ? std::to_string((*stream)->status()) : "<error>", start);
      if (!stream.ok()) return TransportError(stream.error(), "WATCH", target);
      auto& s = *stream;
      if (Is2xx(s->status())) {
        return NewWatchStream(std::move(s));
      }
      net::Response resp;
      resp.status = s->status();
      resp.headers = s->headers();
      while (resp.body.size() < kMaxErrorBody) {
        auto chunk = s->Next();
        if (!chunk.ok() || chunk->empty()) break;
        resp.body += *chunk;
      }
      if (resp.status == 401 && attempt == 0 && creds_.Refreshable()) {
        creds_.Invalidate();
        continue;
      }
      return ErrorFromResponse(resp);
    }
  }

  Result<net::Response> Raw(const std::string& method, const std::string& path,
                            const std::string& body, const std::string& content_type) override {
    return Send(method, path, body, body.empty() ? "" : content_type);
  }

 private:
  Result<Object> ObjectCall(const std::string& method, const std::string& target,
                            const std::string& body, const std::string& content_type) {
    HS_ASSIGN_OR_RETURN(auto resp, Send(method, target, body, content_type));
    if (!Is2xx(resp.status)) return ErrorFromResponse(resp);
    return ParseObject(resp.body, method + " " + target);
  }

  net::Request MakeRequest(const std::string& method, const std::string& target,
                           const std::string& body, const std::string& content_type,
                           const std::string& auth) const {
    net::Request req;
    req.method = method;
    req.target = target;
    req.body = body;
    req.timeout = kRequestTimeout;
    req.headers.emplace_back("Accept", "application/json");
    if (!content_type.empty()) req.headers.emplace_back("Content-Type", content_type);
    if (!auth.empty()) req.headers.emplace_back("Authorization", auth);
    return req;
  }

  void Observe(const char* method, const std::string& code,
               std::chrono::steady_clock::time_point start) {
    RestMetrics::Observe(
        method, code, host_,
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }

  Error TransportError(Error e, const std::string& method, const std::string& target) const {
    // Keep the code (kUnavailable / kTimeout) from the HTTP layer; name what failed.
    e.message =
        method + " " + config_.server + target.substr(0, target.find('?')) + ": " + e.message;
    return e;
  }

  Result<net::Response> Send(const std::string& method, const std::string& target,
                             const std::string& body, const std::string& content_type) {
    for (int attempt = 0;; ++attempt) {
      if (limiter_) limiter_->Wait();
      HS_ASSIGN_OR_RETURN(auto http, Http());
      HS_ASSIGN_OR_RETURN(auto auth, creds_.AuthorizationHeader());
      auto start = std::chrono::steady_clock::now();
      auto resp = http->Do(MakeRequest(method, target, body, content_type, auth));
      Observe(method.c_str(), resp.ok() ? std::to_string(resp->status) : "<error>", start);
      if (!resp.ok()) return TransportError(resp.error(), method, target);
      if (resp->status == 401 && attempt == 0 && creds_.Refreshable()) {
        // The token may have rotated (exec plugin expiry, projected token file): fetch anew once.
        creds_.Invalidate();
        continue;
      }
      return resp;
    }
  }

  // The HTTP client, rebuilt when an exec plugin hands out a different client certificate.
  Result<std::shared_ptr<net::HttpClient>> Http() {
    if (!config_.exec) return http_;
    HS_ASSIGN_OR_RETURN(auto cert, creds_.ExecClientCertificate());
    std::lock_guard<std::mutex> lock(http_mu_);
    if (cert.cert_pem.empty() || cert.cert_pem == http_cert_) return http_;
    net::HttpClient::Options o = http_->options();
    o.tls.client_cert_pem = cert.cert_pem;
    o.tls.client_key_pem = cert.key_pem;
    HS_ASSIGN_OR_RETURN(auto fresh, net::HttpClient::Create(o));
    http_ = std::move(fresh);
    http_cert_ = cert.cert_pem;
    return http_;
  }

  Config config_;
  Credentials creds_;
  std::string host_;
  std::mutex http_mu_;
  std::shared_ptr<net::HttpClient> http_;
  std::string http_cert_;
  std::unique_ptr<TokenBucket> limiter_;
};

// Kubernetes' override of the common status mapping (src/net/status.h): a Status's reason decides
// first (a 500 with reason NotFound is kNotFound).
Error::Code CodeForReason(std::string_view reason) {
  using C = Error::Code;
  if (reason == "NotFound") return C::kNotFound;
  if (reason == "AlreadyExists") return C::kAlreadyExists;
  if (reason == "Conflict") return C::kConflict;
  if (reason == "Expired" || reason == "Gone") return C::kGone;
  if (reason == "Invalid" || reason == "BadRequest" || reason == "MethodNotAllowed" ||
      reason == "NotAcceptable" || reason == "RequestEntityTooLarge" ||
      reason == "UnsupportedMediaType") {
    return C::kInvalidArgument;
  }
  if (reason == "TooManyRequests") return C::kTooManyRequests;
  if (reason == "Unauthorized") return C::kUnauthorized;
  if (reason == "Forbidden") return C::kForbidden;
  if (reason == "ServerTimeout" || reason == "Timeout" || reason == "InternalError" ||
      reason == "ServiceUnavailable") {
    return C::kUnavailable;
  }
  return C::kUnknown;
}

}  // namespace

std::unique_ptr<WatchStream> NewWatchStream(std::unique_ptr<net::ResponseStream> body,
                                            size_t max_event_bytes) {
  return std::make_unique<WatchStreamImpl>(std::move(body), max_event_bytes);
}

Error ErrorFromResponse(const net::Response& resp) {
  Error e;
  e.http_status = resp.status;
  boost::system::error_code ec;
  json::value v = json::parse(resp.body, ec);
  const json::object* status = nullptr;
  if (!ec && v.is_object()) {
    auto* kind = v.get_object().if_contains("kind");
    if (kind != nullptr && kind->is_string() && kind->get_string() == "Status") {
      status = &v.get_object();
    }
  }
  int64_t retry_seconds = -1;
  if (status != nullptr) {
    if (auto* r = status->if_contains("reason"); r != nullptr && r->is_string()) {
      e.reason = r->get_string();
    }
    if (auto* m = status->if_contains("message"); m != nullptr && m->is_string()) {
      e.message = m->get_string();
    }
    if (auto* d = status->if_contains("details"); d != nullptr && d->is_object()) {
      if (auto* ra = d->get_object().if_contains("retryAfterSeconds");
          ra != nullptr && ra->is_int64()) {
        retry_seconds = ra->get_int64();
      }
    }
  }
  e.code = CodeForReason(e.reason);
  if (e.code == Error::Code::kUnknown) e.code = net::ErrorCodeForStatus(resp.status);
  if (e.message.empty()) {
    e.message = "HTTP " + std::to_string(resp.status);
    if (!resp.body.empty()) e.message += ": " + Truncate(resp.body, 200);
  }
  if (auto secs = net::RetryAfterSeconds(resp.Header("retry-after"))) {
    retry_seconds = secs->count();
  }
  if (retry_seconds >= 0 && (resp.status == 429 || resp.status >= 500)) {
    e.retry_after = std::chrono::seconds(retry_seconds);
  }
  return e;
}

Result<std::shared_ptr<Client>> Client::Create(const Config& config) {
  if (config.server.empty()) {
    return Error::Make(Error::Code::kInvalidArgument, "kube client: config has no server URL");
  }
  net::HttpClient::Options o;
  o.base_url = config.server;
  o.tls = config.tls;
  o.user_agent = config.user_agent;
  auto http = net::HttpClient::Create(o);
  if (!http.ok()) {
    Error e = http.error();
    e.message = "kube client for " + config.server + ": " + e.message;
    return e;
  }
  return std::shared_ptr<Client>(std::make_shared<ClientImpl>(config, std::move(http).value()));
}

}  // namespace hyperslice::kube
