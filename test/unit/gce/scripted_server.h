// A loopback HttpServer whose answers a unit test scripts, recording every request it receives.
// Used to drive the client through exact sequences (503 then 200, a 401, pages) that a test must
// control precisely; behaviour against the GCE simulator is covered by test/integration/gce.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "src/net/server.h"

namespace hyperslice::gce::testing {

struct Scripted {
  int status = 200;
  std::string body;
  net::Headers headers;
};

class ScriptedServer {
 public:
  ScriptedServer() {
    net::HttpServer::Options o;
    o.threads = 2;
    auto s = net::HttpServer::Start(o, [this](const net::ServerRequest& req,
                                              std::shared_ptr<net::Responder> r) {
      Scripted answer;
      {
        std::lock_guard lock(mu_);
        requests_.push_back(req);
        auto key = req.method + " " + req.path;
        auto& queue = script_[key];
        if (!queue.empty()) {
          answer = queue.front();
          if (queue.size() > 1 || !sticky_[key]) queue.pop_front();
        } else if (fallback_) {
          answer = fallback_(req);
        } else {
          answer = {
              404,
              R"({"error":{"code":404,"message":"not scripted","errors":[{"reason":"notFound"}]}})"};
        }
      }
      r->Send(answer.status, answer.body, answer.headers);
    });
    EXPECT_TRUE(s.ok()) << s.error().ToString();
    server_ = std::move(s).value();
  }

  // Answers for "METHOD /path", in order. With `sticky`, the last one repeats forever.
  void Script(const std::string& method_path, std::vector<Scripted> answers, bool sticky = false) {
    std::lock_guard lock(mu_);
    auto& q = script_[method_path];
    for (auto& a : answers) q.push_back(std::move(a));
    sticky_[method_path] = sticky;
  }
  // `f` runs under the server's lock: it must not call back into this ScriptedServer.
  void Fallback(std::function<Scripted(const net::ServerRequest&)> f) {
    std::lock_guard lock(mu_);
    fallback_ = std::move(f);
  }
  std::vector<net::ServerRequest> Requests() const {
    std::lock_guard lock(mu_);
    return requests_;
  }
  std::vector<net::ServerRequest> Requests(const std::string& method,
                                           const std::string& path) const {
    std::lock_guard lock(mu_);
    std::vector<net::ServerRequest> out;
    for (const auto& r : requests_) {
      if (r.method == method && r.path == path) out.push_back(r);
    }
    return out;
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(server_->port()); }

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::deque<Scripted>> script_;
  std::map<std::string, bool> sticky_;
  std::function<Scripted(const net::ServerRequest&)> fallback_;
  std::vector<net::ServerRequest> requests_;
  std::unique_ptr<net::HttpServer> server_;
};

}  // namespace hyperslice::gce::testing
