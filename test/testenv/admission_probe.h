// Admission configurations take effect in the apiserver asynchronously: a test sends a probe (a
// dry run, which stores nothing) until the answer shows the webhook acted, before it asserts on
// what the webhook does. One instead of a polling loop per webhook test. Header-only.
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include <boost/json.hpp>

#include "src/base/result.h"
#include "src/kube/client.h"
#include "src/kube/resource.h"
#include "test/testenv/eventually.h"

namespace hyperslice::testenv {

using Answer = Result<net::Response>;

// Sends `probe` until `acted` holds for its answer or `timeout` passes: Ok, or kTimeout quoting
// the last answer.
inline Status ProbeUntil(const std::function<Answer()>& probe,
                         const std::function<bool(const Answer&)>& acted,
                         std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  std::string last;
  bool done = Eventually(
      [&] {
        Answer res = probe();
        if (acted(res)) return true;
        last = res.ok() ? std::to_string(res->status) + " " + res->body : res.error().ToString();
        return false;
      },
      timeout, std::chrono::milliseconds(100));
  if (done) return OkStatus();
  return Error::Make(Error::Code::kTimeout, "the webhook never acted on the probe; last: " + last);
}

// The apiserver's answer to creating `obj` in r's collection of `ns` as a dry run (dryRun=All).
inline Answer DryRunCreate(kube::Client& client, const kube::Resource& r, const std::string& ns,
                           const boost::json::object& obj) {
  return client.Raw("POST", r.CollectionPath(ns) + "?dryRun=All", boost::json::serialize(obj));
}

}  // namespace hyperslice::testenv
