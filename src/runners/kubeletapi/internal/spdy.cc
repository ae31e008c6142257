#include "src/runners/kubeletapi/internal/spdy.h"

#include <algorithm>
#include <array>

#include "src/base/strings.h"

namespace hyperslice::runners::kubeletapi::internal::spdy {
namespace {

// The SPDY/3 header compression dictionary (draft-mbelshe-httpbis-spdy-00 §2.6.10.1): 1423 bytes,
// zlib dictionary id (Adler-32) 0xe3c6a7c2. Both peers prime their zlib streams with it.
constexpr char kDictionary[] =
    "\000\000\000\007options\000\000\000\004head\000\000\000\004post\000\000\000\003put\000"
    "\000\000\006delete\000\000\000\005trace\000\000\000\006accept\000\000\000\016accept-char"
    "set\000\000\000\017accept-encoding\000\000\000\017accept-language\000\000\000\015accept-"
    "ranges\000\000\000\003age\000\000\000\005allow\000\000\000\015authorization\000\000\000"
    "\015cache-control\000\000\000\012connection\000\000\000\014content-base\000\000\000\020c"
    "ontent-encoding\000\000\000\020content-language\000\000\000\016content-length\000\000"
    "\000\020content-location\000\000\000\013content-md5\000\000\000\015content-range\000\000"
    "\000\014content-type\000\000\000\004date\000\000\000\004etag\000\000\000\006expect\000"
    "\000\000\007expires\000\000\000\004from\000\000\000\004host\000\000\000\010if-match\000"
    "\000\000\021if-modified-since\000\000\000\015if-none-match\000\000\000\010if-range\000"
    "\000\000\023if-unmodified-since\000\000\000\015last-modified\000\000\000\010location\000"
    "\000\000\014max-forwards\000\000\000\006pragma\000\000\000\022proxy-authenticate\000\000"
    "\000\023proxy-authorization\000\000\000\005range\000\000\000\007referer\000\000\000\013r"
    "etry-after\000\000\000\006server\000\000\000\002te\000\000\000\007trailer\000\000\000"
    "\021transfer-encoding\000\000\000\007upgrade\000\000\000\012user-agent\000\000\000\004va"
    "ry\000\000\000\003via\000\000\000\007warning\000\000\000\020www-authenticate\000\000\000"
    "\006method\000\000\000\003get\000\000\000\006status\000\000\000\006200 OK\000\000\000"
    "\007version\000\000\000\010HTTP/1.1\000\000\000\003url\000\000\000\006public\000\000\000"
    "\012set-cookie\000\000\000\012keep-alive\000\000\000\006origin10010120120220520630030230"
    "3304305306307402405406407408409410411412413414415416417502504505203 Non-Authoritative In"
    "formation204 No Content301 Moved Permanently400 Bad Request401 Unauthorized403 Forbidden"
    "404 Not Found500 Internal Server Error501 Not Implemented503 Service UnavailableJan Feb "
    "Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMT"
    "chunked,text/html,image/png,image/jpg,image/gif,application/xml,application/xhtml+xml,te"
    "xt/plain,text/javascript,publicprivatemax-age=gzip,deflate,sdchcharset=utf-8charset=iso-"
    "8859-1,utf-,*,enq=0.";
constexpr size_t kDictionarySize = sizeof(kDictionary) - 1;
static_assert(kDictionarySize == 1423);

const Bytef* DictionaryBytes() { return reinterpret_cast<const Bytef*>(kDictionary); }

Error ProtocolError(std::string message) {
  return Error::Make(Error::Code::kInvalidArgument, "spdy: " + std::move(message), "BadRequest");
}

uint32_t Read32(std::string_view b, size_t at) {
  return (static_cast<uint32_t>(static_cast<uint8_t>(b[at])) << 24) |
         (static_cast<uint32_t>(static_cast<uint8_t>(b[at + 1])) << 16) |
         (static_cast<uint32_t>(static_cast<uint8_t>(b[at + 2])) << 8) |
         static_cast<uint32_t>(static_cast<uint8_t>(b[at + 3]));
}

void Put32(std::string& out, uint32_t v) {
  out += static_cast<char>((v >> 24) & 0xff);
  out += static_cast<char>((v >> 16) & 0xff);
  out += static_cast<char>((v >> 8) & 0xff);
  out += static_cast<char>(v & 0xff);
}

// Control frame header: control bit, version, type, flags, 24-bit length.
std::string ControlHeader(ControlType type, uint8_t flags, size_t length) {
  std::string out;
  out.reserve(8 + length);
  Put32(out, 0x80000000U | (static_cast<uint32_t>(kVersion) << 16) | static_cast<uint32_t>(type));
  Put32(out, (static_cast<uint32_t>(flags) << 24) | static_cast<uint32_t>(length & 0xffffff));
  return out;
}

}  // namespace

Result<std::optional<RawFrame>> FrameParser::Next() {
  std::string_view b(buf_);
  b.remove_prefix(pos_);
  if (b.size() < 8) {
    // Keep the buffer from growing without bound: drop what was consumed.
    if (pos_ > 0) {
      buf_.erase(0, pos_);
      pos_ = 0;
    }
    return std::optional<RawFrame>();
  }
  uint32_t first = Read32(b, 0);
  uint32_t second = Read32(b, 4);
  RawFrame f;
  f.control = (first & 0x80000000U) != 0;
  f.flags = static_cast<uint8_t>(second >> 24);
  uint32_t length = second & 0xffffff;
  if (f.control) {
    f.version = static_cast<uint16_t>((first >> 16) & 0x7fff);
    f.type = static_cast<uint16_t>(first & 0xffff);
    if (f.version != kVersion) {
      return ProtocolError("unsupported version " + std::to_string(f.version));
    }
    if (length > kMaxControlFrame) {
      return ProtocolError("control frame of " + std::to_string(length) + " bytes");
    }
  } else {
    f.stream_id = first & 0x7fffffffU;
  }
  if (b.size() < 8 + static_cast<size_t>(length)) return std::optional<RawFrame>();
  f.payload.assign(b.substr(8, length));
  pos_ += 8 + length;
  if (pos_ == buf_.size()) {
    buf_.clear();
    pos_ = 0;
  }
  return std::optional<RawFrame>(std::move(f));
}

std::string EncodeHeaderBlock(const HeaderBlock& headers) {
  std::string out;
  Put32(out, static_cast<uint32_t>(headers.size()));
  for (const auto& [name, value] : headers) {
    std::string lower = AsciiLower(name);
    Put32(out, static_cast<uint32_t>(lower.size()));
    out += lower;
    Put32(out, static_cast<uint32_t>(value.size()));
    out += value;
  }
  return out;
}

Result<HeaderBlock> DecodeHeaderBlock(std::string_view bytes) {
  if (bytes.size() < 4) return ProtocolError("header block shorter than its count");
  uint32_t count = Read32(bytes, 0);
  size_t at = 4;
  // Every pair takes at least 8 bytes: a larger count cannot be honest.
  if (count > (bytes.size() - at) / 8) return ProtocolError("header block count too large");
  HeaderBlock out;
  out.reserve(count);
  for (uint32_t i = 0; i < count; ++i) {
    std::string_view parts[2];
    for (auto& part : parts) {
      if (bytes.size() - at < 4) return ProtocolError("header block truncated");
      uint32_t len = Read32(bytes, at);
      at += 4;
      if (len > bytes.size() - at) return ProtocolError("header block truncated");
      part = bytes.substr(at, len);
      at += len;
    }
    if (parts[0].empty()) return ProtocolError("empty header name");
    for (char c : parts[0]) {
      if (std::isupper(static_cast<unsigned char>(c)) != 0) {
        return ProtocolError("header name not lower-case");
      }
    }
    out.emplace_back(std::string(parts[0]), std::string(parts[1]));
  }
  if (at != bytes.size()) return ProtocolError("bytes after the header block");
  return out;
}

HeaderCompressor::HeaderCompressor() {
  ok_ = deflateInit(&z_, Z_DEFAULT_COMPRESSION) == Z_OK &&
        deflateSetDictionary(&z_, DictionaryBytes(), kDictionarySize) == Z_OK;
}

HeaderCompressor::~HeaderCompressor() { deflateEnd(&z_); }

Result<std::string> HeaderCompressor::Compress(const HeaderBlock& headers) {
  if (!ok_) return Error::Make(Error::Code::kInternal, "spdy: zlib compressor unavailable");
  std::string in = EncodeHeaderBlock(headers);
  std::string out;
  z_.next_in = reinterpret_cast<Bytef*>(in.data());
  z_.avail_in = static_cast<uInt>(in.size());
  std::array<Bytef, 4096> chunk{};
  do {
    z_.next_out = chunk.data();
    z_.avail_out = static_cast<uInt>(chunk.size());
    int rc = deflate(&z_, Z_SYNC_FLUSH);
    if (rc != Z_OK && rc != Z_BUF_ERROR) {
      ok_ = false;
      return Error::Make(Error::Code::kInternal, "spdy: deflate failed");
    }
    out.append(reinterpret_cast<const char*>(chunk.data()), chunk.size() - z_.avail_out);
  } while (z_.avail_out == 0);
  return out;
}

HeaderDecompressor::HeaderDecompressor(size_t max_output) : max_output_(max_output) {
  ok_ = inflateInit(&z_) == Z_OK;
}

HeaderDecompressor::~HeaderDecompressor() { inflateEnd(&z_); }

Result<HeaderBlock> HeaderDecompressor::Decompress(std::string_view compressed) {
  if (!ok_) return Error::Make(Error::Code::kInternal, "spdy: zlib decompressor unavailable");
  // A failed block leaves the shared stream in an unknown state: every later block is refused.
  if (broken_) return ProtocolError("header compression context broken by an earlier block");
  std::string out;
  z_.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(compressed.data()));
  z_.avail_in = static_cast<uInt>(compressed.size());
  std::array<Bytef, 4096> chunk{};
  while (true) {
    z_.next_out = chunk.data();
    z_.avail_out = static_cast<uInt>(chunk.size());
    int rc = inflate(&z_, Z_SYNC_FLUSH);
    if (rc == Z_NEED_DICT) {
      if (inflateSetDictionary(&z_, DictionaryBytes(), kDictionarySize) != Z_OK) {
        broken_ = true;
        return ProtocolError("header block compressed with another dictionary");
      }
      rc = Z_OK;
    }
    size_t produced = chunk.size() - z_.avail_out;
    out.append(reinterpret_cast<const char*>(chunk.data()), produced);
    if (out.size() > max_output_) {
      broken_ = true;
      return ProtocolError("header block inflates beyond " + std::to_string(max_output_) +
                           " bytes");
    }
    if (rc == Z_STREAM_END) {
      broken_ = true;  // SPDY's stream never ends; nothing after this can be decoded
      break;
    }
    if (rc == Z_BUF_ERROR) break;  // no progress possible: input consumed, output flushed
    if (rc != Z_OK) {
      broken_ = true;
      return ProtocolError("corrupt compressed header block");
    }
    if (z_.avail_in == 0 && z_.avail_out != 0) break;
  }
  z_.next_in = nullptr;
  z_.avail_in = 0;
  auto block = DecodeHeaderBlock(out);
  if (!block.ok()) broken_ = true;
  return block;
}

Result<SynStream> ParseSynStream(const RawFrame& frame, HeaderDecompressor& headers) {
  if (frame.payload.size() < 10) return ProtocolError("short SYN_STREAM");
  SynStream s;
  s.stream_id = Read32(frame.payload, 0) & 0x7fffffffU;
  s.associated_to = Read32(frame.payload, 4) & 0x7fffffffU;
  s.priority = static_cast<uint8_t>(static_cast<uint8_t>(frame.payload[8]) >> 5);
  s.flags = frame.flags;
  if (s.stream_id == 0) return ProtocolError("SYN_STREAM with stream id 0");
  auto block = headers.Decompress(std::string_view(frame.payload).substr(10));
  if (!block.ok()) return block.error();
  s.headers = std::move(*block);
  return s;
}

Result<std::pair<uint32_t, HeaderBlock>> ParseHeaders(const RawFrame& frame,
                                                      HeaderDecompressor& headers) {
  if (frame.payload.size() < 4) return ProtocolError("short HEADERS/SYN_REPLY");
  uint32_t id = Read32(frame.payload, 0) & 0x7fffffffU;
  auto block = headers.Decompress(std::string_view(frame.payload).substr(4));
  if (!block.ok()) return block.error();
  return std::make_pair(id, std::move(*block));
}

Result<RstStream> ParseRstStream(const RawFrame& frame) {
  if (frame.payload.size() != 8) return ProtocolError("RST_STREAM of the wrong size");
  return RstStream{Read32(frame.payload, 0) & 0x7fffffffU, Read32(frame.payload, 4)};
}

Result<uint32_t> ParsePing(const RawFrame& frame) {
  if (frame.payload.size() != 4) return ProtocolError("PING of the wrong size");
  return Read32(frame.payload, 0);
}

Result<GoAway> ParseGoAway(const RawFrame& frame) {
  // SPDY/3 carries a status; SPDY/2 peers sent only the stream id.
  if (frame.payload.size() != 8 && frame.payload.size() != 4) {
    return ProtocolError("GOAWAY of the wrong size");
  }
  GoAway g;
  g.last_good_stream_id = Read32(frame.payload, 0) & 0x7fffffffU;
  if (frame.payload.size() == 8) g.status = Read32(frame.payload, 4);
  return g;
}

Result<WindowUpdate> ParseWindowUpdate(const RawFrame& frame) {
  if (frame.payload.size() != 8) return ProtocolError("WINDOW_UPDATE of the wrong size");
  return WindowUpdate{Read32(frame.payload, 0) & 0x7fffffffU,
                      Read32(frame.payload, 4) & 0x7fffffffU};
}

std::string SynStreamFrame(uint32_t stream_id, const std::string& compressed_headers,
                           uint8_t flags) {
  std::string out = ControlHeader(ControlType::kSynStream, flags, 10 + compressed_headers.size());
  Put32(out, stream_id & 0x7fffffffU);
  Put32(out, 0);
  out += '\0';  // priority 0
  out += '\0';  // slot
  out += compressed_headers;
  return out;
}

std::string SynReplyFrame(uint32_t stream_id, const std::string& compressed_headers, bool fin) {
  std::string out =
      ControlHeader(ControlType::kSynReply, fin ? kFlagFin : 0, 4 + compressed_headers.size());
  Put32(out, stream_id & 0x7fffffffU);
  out += compressed_headers;
  return out;
}

std::string DataFrame(uint32_t stream_id, std::string_view data, bool fin) {
  std::string out;
  out.reserve(8 + data.size());
  Put32(out, stream_id & 0x7fffffffU);
  Put32(out, (static_cast<uint32_t>(fin ? kFlagFin : 0) << 24) |
                 static_cast<uint32_t>(data.size() & 0xffffff));
  out += data;
  return out;
}

std::string RstStreamFrame(uint32_t stream_id, RstStatus status) {
  std::string out = ControlHeader(ControlType::kRstStream, 0, 8);
  Put32(out, stream_id & 0x7fffffffU);
  Put32(out, static_cast<uint32_t>(status));
  return out;
}

std::string PingFrame(uint32_t id) {
  std::string out = ControlHeader(ControlType::kPing, 0, 4);
  Put32(out, id);
  return out;
}

std::string GoAwayFrame(uint32_t last_good_stream_id, uint32_t status) {
  std::string out = ControlHeader(ControlType::kGoAway, 0, 8);
  Put32(out, last_good_stream_id & 0x7fffffffU);
  Put32(out, status);
  return out;
}

std::string WindowUpdateFrame(uint32_t stream_id, uint32_t delta) {
  std::string out = ControlHeader(ControlType::kWindowUpdate, 0, 8);
  Put32(out, stream_id & 0x7fffffffU);
  Put32(out, delta & 0x7fffffffU);
  return out;
}

std::string HeaderValue(const HeaderBlock& headers, std::string_view name) {
  std::string lower = AsciiLower(name);
  for (const auto& [k, v] : headers) {
    if (AsciiLower(k) == lower) return v.substr(0, v.find('\0'));
  }
  return {};
}

}  // namespace hyperslice::runners::kubeletapi::internal::spdy
