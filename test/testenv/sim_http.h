// A plain HTTP JSON client for a simulator's endpoint (its /control API, or its provider API with
// the simulator's key): one instead of a copy per simulator test. Header-only; errors are values.
#pragma once

#include <memory>
#include <string>

#include <boost/json.hpp>

#include "src/base/result.h"
#include "src/net/http.h"

namespace hyperslice::testenv {

class SimHttp {
 public:
  // `bearer`, when set, goes with every request as "Authorization: Bearer <bearer>".
  explicit SimHttp(const std::string& base_url, std::string bearer = "")
      : bearer_(std::move(bearer)) {
    net::HttpClient::Options o;
    o.base_url = base_url;
    http_ = net::HttpClient::Create(o).value();
  }
  // The parsed answer; an error when the call fails, the status is not 200 or the answer is not
  // JSON. `body`, when given, is sent as JSON.
  Result<boost::json::value> Call(const std::string& method, const std::string& target,
                                  const boost::json::object* body = nullptr) {
    net::Request req;
    req.method = method;
    req.target = target;
    if (!bearer_.empty()) req.headers.emplace_back("Authorization", "Bearer " + bearer_);
    if (body != nullptr) {
      req.body = boost::json::serialize(*body);
      req.headers.emplace_back("Content-Type", "application/json");
    }
    HS_ASSIGN_OR_RETURN(auto resp, http_->Do(req));
    if (resp.status != 200) {
      return Error::Make(Error::Code::kInternal, method + " " + target + ": " +
                                                     std::to_string(resp.status) + " " + resp.body);
    }
    boost::system::error_code ec;
    boost::json::value v = boost::json::parse(resp.body, ec);
    if (ec) return Error::Make(Error::Code::kInternal, target + ": answer is not JSON");
    return v;
  }

 private:
  std::string bearer_;
  std::shared_ptr<net::HttpClient> http_;
};

}  // namespace hyperslice::testenv
