// libFuzzer target over the watch-stream decoder (src/kube/internal/watch_decoder.h).
//
// Besides "never crashes, never leaks, no UB" (ASan/UBSan), it checks a differential property:
// the events decoded and the error reached are the same whether the input arrives in one piece or
// split into chunks (sizes drawn from the input's first bytes), because a decoder must not depend
// on chunk boundaries.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json/serialize.hpp>

#include "src/kube/internal/watch_decoder.h"

namespace {

using hyperslice::Error;
using hyperslice::kube::WatchDecoder;

struct Outcome {
  std::vector<std::string> events;  // "TYPE object-json"
  bool failed = false;
  Error::Code code = Error::Code::kUnknown;
};

// Small limit so that the size bound is exercised by small inputs.
constexpr size_t kMaxEvent = 4096;

void Drain(WatchDecoder& d, Outcome& out) {
  while (auto ev = d.Pop()) {
    out.events.push_back(std::string(hyperslice::kube::WatchEventTypeName(ev->type)) + " " +
                         boost::json::serialize(ev->object));
  }
}

Outcome Decode(std::string_view data, const std::vector<size_t>& chunks) {
  WatchDecoder d(kMaxEvent);
  Outcome out;
  size_t pos = 0, i = 0;
  while (pos < data.size()) {
    size_t n = chunks.empty() ? data.size() : chunks[i++ % chunks.size()];
    n = std::min(n, data.size() - pos);
    auto st = d.Feed(data.substr(pos, n));
    Drain(d, out);
    pos += n;
    if (!st.ok()) {
      out.failed = true;
      out.code = st.error().code;
      return out;
    }
  }
  auto st = d.Finish();
  Drain(d, out);
  if (!st.ok()) {
    out.failed = true;
    out.code = st.error().code;
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  // First byte: how many chunk sizes follow (0..7); each next byte is a chunk size (1..256).
  size_t nchunks = data[0] % 8;
  size_t header = 1 + nchunks;
  if (size < header) return 0;
  std::vector<size_t> chunks;
  for (size_t i = 0; i < nchunks; ++i) chunks.push_back(size_t{data[1 + i]} + 1);
  if (chunks.empty()) chunks.push_back(1);
  std::string_view body(reinterpret_cast<const char*>(data) + header, size - header);

  Outcome whole = Decode(body, {});
  Outcome split = Decode(body, chunks);
  if (whole.failed != split.failed || whole.code != split.code || whole.events != split.events) {
    std::fprintf(stderr, "watch decoder: chunking changed the outcome (%zu vs %zu events)\n",
                 whole.events.size(), split.events.size());
    std::abort();
  }
  return 0;
}
