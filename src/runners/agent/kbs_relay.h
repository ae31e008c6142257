// The sealed agent's relay to the key broker (issue 21 §6): a pod's network is its own loopback,
// so its workload reaches the link controller's resource endpoint (kbs/kbs.h,
// `POST /kbs/v0/resource/<name>`) through its token socket, which forwards the request as it came
// (Authorization and body) and the answer as it went. The agent learns nothing it could use: the
// token binds the workload's key and the secret comes back encrypted to that key.
//
// Where to: the issuer (`iss`) of the tokens the link controller handed this agent over the
// mutually authenticated link, since the resource endpoint is served on the issuer's listener;
// never a URL a workload names. HTTPS verified against the runners CA.
//
// Thread-safety: all methods from any thread.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "src/base/result.h"
#include "src/net/http.h"

namespace hyperslice::runners::agent {

struct KbsAsk {
  std::string resource;       // <name> of /kbs/v0/resource/<name>
  std::string authorization;  // the Authorization header as sent ("" when absent)
  std::string body;
};

struct KbsAnswer {
  int status = 0;
  std::string body;
};

class KbsRelay {
 public:
  explicit KbsRelay(std::string runners_ca_pem) : ca_pem_(std::move(runners_ca_pem)) {}
  // Notes the issuer of a token the link controller issued.
  void LearnIssuer(const std::string& token);
  // Forwards; the broker's statuses are answers, not errors. Errors: kInvalidArgument (a
  // resource name outside [A-Za-z0-9._-]), kUnavailable (no token issued yet, transport).
  Result<KbsAnswer> Forward(const KbsAsk& ask);

 private:
  std::string ca_pem_;
  std::mutex mu_;
  std::string issuer_;
  std::shared_ptr<net::HttpClient> client_;  // for issuer_
};

}  // namespace hyperslice::runners::agent
