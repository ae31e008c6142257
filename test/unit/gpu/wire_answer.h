// What the wire-format tests feed a decoder: an HTTP answer as the server sent it.
#pragma once

#include <string>
#include <utility>

#include "src/net/http.h"

namespace hyperslice::gpu::wire_test {

inline net::Response Answer(int status, std::string body) {
  net::Response r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

}  // namespace hyperslice::gpu::wire_test
