// libFuzzer target over the kubelet API's SPDY/3.1 frame parser and header-block decoding
// (src/runners/kubeletapi/internal/spdy.h): bytes a client sends after the upgrade.
//
// Whatever arrives, parsing must not crash or hit UB (ASan/UBSan); splitting the same bytes at
// another point must yield the same frames; a frame's payload never exceeds its limit; decoded
// header names are lower-case and non-empty.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "src/runners/kubeletapi/internal/spdy.h"

namespace spdy = hyperslice::runners::kubeletapi::internal::spdy;

namespace {

void Check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "kubeletapi spdy fuzz: %s\n", what);
  std::abort();
}

// Every frame until more bytes are needed or an error; `failed` tells which.
std::vector<spdy::RawFrame> Frames(std::string_view bytes, size_t split, bool* failed) {
  spdy::FrameParser p;
  std::vector<spdy::RawFrame> out;
  *failed = false;
  auto drain = [&] {
    while (true) {
      auto f = p.Next();
      if (!f.ok()) {
        *failed = true;
        return false;
      }
      if (!f->has_value()) return true;
      out.push_back(std::move(**f));
    }
  };
  p.Feed(bytes.substr(0, split));
  if (!drain()) return out;
  p.Feed(bytes.substr(split));
  drain();
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  bool failed_a = false;
  bool failed_b = false;
  auto a = Frames(bytes, bytes.size(), &failed_a);
  auto b = Frames(bytes, bytes.size() / 2, &failed_b);
  Check(failed_a == failed_b && a.size() == b.size(), "frames depend on how bytes were split");
  spdy::HeaderDecompressor in(64 * 1024);
  for (size_t i = 0; i < a.size(); ++i) {
    const auto& f = a[i];
    Check(f.payload == b[i].payload && f.flags == b[i].flags, "frame differs across splits");
    if (!f.control) {
      Check(f.payload.size() <= spdy::kMaxDataFrame, "data frame over its limit");
      continue;
    }
    Check(f.payload.size() <= spdy::kMaxControlFrame, "control frame over its limit");
    switch (static_cast<spdy::ControlType>(f.type)) {
      case spdy::ControlType::kSynStream: {
        auto syn = spdy::ParseSynStream(f, in);
        if (syn.ok()) {
          Check(syn->stream_id != 0, "stream id 0 accepted");
          for (const auto& [k, v] : syn->headers) {
            Check(!k.empty(), "empty header name accepted");
            for (char c : k) Check(!(c >= 'A' && c <= 'Z'), "upper-case header name accepted");
          }
        }
        break;
      }
      case spdy::ControlType::kSynReply:
      case spdy::ControlType::kHeaders:
        (void)spdy::ParseHeaders(f, in);
        break;
      case spdy::ControlType::kRstStream:
        (void)spdy::ParseRstStream(f);
        break;
      case spdy::ControlType::kPing:
        (void)spdy::ParsePing(f);
        break;
      case spdy::ControlType::kGoAway:
        (void)spdy::ParseGoAway(f);
        break;
      case spdy::ControlType::kWindowUpdate:
        (void)spdy::ParseWindowUpdate(f);
        break;
      default:
        break;
    }
  }
  // The header block format alone.
  auto block = spdy::DecodeHeaderBlock(bytes);
  if (block.ok()) {
    auto again = spdy::DecodeHeaderBlock(spdy::EncodeHeaderBlock(*block));
    Check(again.ok() && *again == *block, "header block does not round-trip");
  }
  return 0;
}
