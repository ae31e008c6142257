// SPDY/3.1 framing as moby/spdystream (under k8s.io/streaming's httpstream/spdy) speaks it: the
// transport kube-apiserver still uses toward kubelets for exec, attach and port-forward.
//
// Hand-written because no maintained C++ SPDY library exists (SPDY was superseded by HTTP/2 and
// every browser and server library dropped it); only what the kubelet's side of the protocol
// needs is here: frame parsing and serialisation, and header blocks (the SPDY/3 name/value block
// format, zlib-compressed with the SPDY/3 dictionary, one compression context per direction for
// the whole connection). spdystream does no flow control (it ignores WINDOW_UPDATE and SETTINGS),
// so neither does this side: windows are never enforced.
//
// Not thread-safe; one parser and one compressor/decompressor pair per connection.
#pragma once

#include <zlib.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "src/base/result.h"

namespace hyperslice::runners::kubeletapi::internal::spdy {

inline constexpr uint16_t kVersion = 3;

enum class ControlType : uint16_t {
  kSynStream = 1,
  kSynReply = 2,
  kRstStream = 3,
  kSettings = 4,
  kPing = 6,
  kGoAway = 7,
  kHeaders = 8,
  kWindowUpdate = 9,
};

inline constexpr uint8_t kFlagFin = 0x01;
inline constexpr uint8_t kFlagUnidirectional = 0x02;

// RST_STREAM status codes.
enum class RstStatus : uint32_t {
  kProtocolError = 1,
  kInvalidStream = 2,
  kRefusedStream = 3,
  kUnsupportedVersion = 4,
  kCancel = 5,
  kInternalError = 6,
  kFlowControlError = 7,
  kStreamInUse = 8,
  kStreamAlreadyClosed = 9,
};

// Frame lengths are 24 bits; this side refuses larger control frames (header blocks of a few
// names) to bound memory per connection.
inline constexpr uint32_t kMaxControlFrame = 64 * 1024;
inline constexpr uint32_t kMaxDataFrame = (1U << 24) - 1;

// One frame as read off the wire; `payload` is the frame's data after the 8-byte header.
struct RawFrame {
  bool control = false;
  uint16_t version = 0;    // control frames
  uint16_t type = 0;       // control frames
  uint32_t stream_id = 0;  // data frames
  uint8_t flags = 0;
  std::string payload;
};

// Splits bytes into frames. Feed any amount; Next() yields each complete frame once.
class FrameParser {
 public:
  void Feed(std::string_view bytes) { buf_.append(bytes); }
  // A complete frame, nullopt when more bytes are needed, or an error (oversized control frame,
  // wrong version) after which the connection must be dropped.
  Result<std::optional<RawFrame>> Next();
  size_t buffered() const { return buf_.size() - pos_; }

 private:
  std::string buf_;
  size_t pos_ = 0;
};

// Header name/value pairs (names lower-case; several values of a name joined by NUL).
using HeaderBlock = std::vector<std::pair<std::string, std::string>>;

// The uncompressed name/value block: 32-bit count, then 32-bit length-prefixed names and values.
std::string EncodeHeaderBlock(const HeaderBlock& headers);
Result<HeaderBlock> DecodeHeaderBlock(std::string_view bytes);

// Compresses header blocks sent on one connection (zlib stream with the SPDY/3 dictionary, each
// block ended with a sync flush so the peer can decode it alone).
class HeaderCompressor {
 public:
  HeaderCompressor();
  ~HeaderCompressor();
  HeaderCompressor(const HeaderCompressor&) = delete;
  HeaderCompressor& operator=(const HeaderCompressor&) = delete;
  Result<std::string> Compress(const HeaderBlock& headers);

 private:
  z_stream z_{};
  bool ok_ = false;
};

// Decompresses header blocks received on one connection (the peer's single zlib stream).
class HeaderDecompressor {
 public:
  // `max_output`: a block that inflates to more is refused (compression bombs).
  explicit HeaderDecompressor(size_t max_output = size_t{256} * 1024);
  ~HeaderDecompressor();
  HeaderDecompressor(const HeaderDecompressor&) = delete;
  HeaderDecompressor& operator=(const HeaderDecompressor&) = delete;
  Result<HeaderBlock> Decompress(std::string_view compressed);

 private:
  z_stream z_{};
  bool ok_ = false;
  bool broken_ = false;
  size_t max_output_;
};

// Decoded control frames this side acts on.
struct SynStream {
  uint32_t stream_id = 0;
  uint32_t associated_to = 0;
  uint8_t priority = 0;
  uint8_t flags = 0;
  HeaderBlock headers;
};
Result<SynStream> ParseSynStream(const RawFrame& frame, HeaderDecompressor& headers);
// HEADERS (and SYN_REPLY, same layout): the stream id and its headers.
Result<std::pair<uint32_t, HeaderBlock>> ParseHeaders(const RawFrame& frame,
                                                      HeaderDecompressor& headers);
struct RstStream {
  uint32_t stream_id = 0;
  uint32_t status = 0;
};
Result<RstStream> ParseRstStream(const RawFrame& frame);
Result<uint32_t> ParsePing(const RawFrame& frame);
struct GoAway {
  uint32_t last_good_stream_id = 0;
  uint32_t status = 0;
};
Result<GoAway> ParseGoAway(const RawFrame& frame);
struct WindowUpdate {
  uint32_t stream_id = 0;
  uint32_t delta = 0;
};
Result<WindowUpdate> ParseWindowUpdate(const RawFrame& frame);

// Serialised frames. `compressed_headers` comes from HeaderCompressor::Compress.
std::string SynStreamFrame(uint32_t stream_id, const std::string& compressed_headers,
                           uint8_t flags);
std::string SynReplyFrame(uint32_t stream_id, const std::string& compressed_headers, bool fin);
std::string DataFrame(uint32_t stream_id, std::string_view data, bool fin);
std::string RstStreamFrame(uint32_t stream_id, RstStatus status);
std::string PingFrame(uint32_t id);
std::string GoAwayFrame(uint32_t last_good_stream_id, uint32_t status);
std::string WindowUpdateFrame(uint32_t stream_id, uint32_t delta);

// Case-insensitive lookup of a header's first value ("" when absent).
std::string HeaderValue(const HeaderBlock& headers, std::string_view name);

}  // namespace hyperslice::runners::kubeletapi::internal::spdy
