#include "src/base/base64.h"

#include <array>
#include <cstdint>
#include <cstring>

namespace hyperslice {
namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

}  // namespace

void AppendBase64(std::string& out, std::string_view in) {
  // Two output characters per 12 input bits: half the table lookups and stores of a per-character
  // loop.
  static const std::array<std::array<char, 2>, 4096> kPairs = [] {
    std::array<std::array<char, 2>, 4096> t{};
    for (size_t v = 0; v < t.size(); ++v) t[v] = {kAlphabet[v >> 6], kAlphabet[v & 63]};
    return t;
  }();
  size_t at = out.size();
  out.resize(at + (in.size() + 2) / 3 * 4);
  char* o = out.data() + at;
  const auto* p = reinterpret_cast<const unsigned char*>(in.data());
  size_t i = 0;
  for (; i + 3 <= in.size(); i += 3) {
    uint32_t n = (uint32_t{p[i]} << 16) | (uint32_t{p[i + 1]} << 8) | p[i + 2];
    std::memcpy(o, kPairs[n >> 12].data(), 2);
    std::memcpy(o + 2, kPairs[n & 4095].data(), 2);
    o += 4;
  }
  size_t rest = in.size() - i;
  if (rest > 0) {
    uint32_t n = uint32_t{p[i]} << 16;
    if (rest == 2) n |= uint32_t{p[i + 1]} << 8;
    *o++ = kAlphabet[(n >> 18) & 63];
    *o++ = kAlphabet[(n >> 12) & 63];
    *o++ = rest == 2 ? kAlphabet[(n >> 6) & 63] : '=';
    *o++ = '=';
  }
}

std::string Base64Encode(std::string_view in) {
  std::string out;
  AppendBase64(out, in);
  return out;
}

Result<std::string> Base64Decode(std::string_view in, std::string_view what) {
  static const auto kTable = [] {
    std::array<int8_t, 256> t{};
    t.fill(-1);
    for (int i = 0; i < 64; ++i)
      t[static_cast<unsigned char>(kAlphabet[i])] = static_cast<int8_t>(i);
    return t;
  }();
  std::string out;
  out.reserve(in.size() * 3 / 4);
  uint32_t acc = 0;
  int bits = 0;
  size_t pad = 0;
  for (char c : in) {
    if (c == ' ' || c == '\n' || c == '\r' || c == '\t') continue;
    if (c == '=') {
      ++pad;
      continue;
    }
    int8_t v = kTable[static_cast<unsigned char>(c)];
    if (v < 0 || pad > 0) {
      return Error::Make(Error::Code::kInvalidArgument, std::string(what) + " is not valid base64");
    }
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  if (pad > 2) {
    return Error::Make(Error::Code::kInvalidArgument, std::string(what) + " is not valid base64");
  }
  return out;
}

std::string Base64UrlEncode(std::string_view in) {
  std::string out = Base64Encode(in);
  while (!out.empty() && out.back() == '=') out.pop_back();
  for (char& c : out) {
    if (c == '+') c = '-';
    if (c == '/') c = '_';
  }
  return out;
}

Result<std::string> Base64UrlDecode(std::string_view in, std::string_view what) {
  std::string standard(in);
  for (char& c : standard) {
    if (c == '-') c = '+';
    if (c == '_') c = '/';
  }
  return Base64Decode(standard, what);
}

}  // namespace hyperslice
