// The GCE simulator's control endpoint (sim/gce: faults, latency, capacity, counters, state) over
// HTTP, for the tests of the TPU operator and its controllers. Header-only.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include <boost/json.hpp>

#include "src/base/result.h"
#include "test/testenv/sim_http.h"

namespace hyperslice::testenv {

// Never subject to the injected faults.
class GceControl {
 public:
  explicit GceControl(const std::string& endpoint) : http_(endpoint) {}
  // The parsed answer, or an error; `body` goes with every method but GET.
  Result<boost::json::value> Call(const std::string& method, const std::string& path,
                                  const boost::json::object& body = {}) {
    return http_.Call(method, path, method == "GET" ? nullptr : &body);
  }
  // Everything the simulator holds (/control/state); empty when the call fails.
  boost::json::object State() {
    auto v = Call("GET", "/control/state");
    return v.ok() && v->is_object() ? v->as_object() : boost::json::object{};
  }
  // Calls received per method ("compute.instances.get"); empty when the call fails.
  std::map<std::string, int64_t> Counters() {
    std::map<std::string, int64_t> out;
    auto v = Call("GET", "/control/counters");
    if (!v.ok() || !v->is_object()) return out;
    const boost::json::object* o = &v->as_object();
    if (const auto* c = o->if_contains("counters"); c && c->is_object()) o = &c->as_object();
    for (const auto& [k, n] : *o) {
      if (n.is_int64()) out[std::string(k)] = n.as_int64();
    }
    return out;
  }
  // Calls received for one method; -1 when the counters cannot be read.
  int64_t Counter(const std::string& method) {
    auto v = Call("GET", "/control/counters");
    if (!v.ok() || !v->is_object()) return -1;
    const auto* n = v->as_object().if_contains(method);
    return n == nullptr ? 0 : n->to_number<int64_t>();
  }

 private:
  SimHttp http_;
};

}  // namespace hyperslice::testenv
