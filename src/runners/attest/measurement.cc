#include <openssl/sha.h>

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include "src/base/json.h"
#include "src/runners/attest/attest.h"

namespace hyperslice::runners::attest {
namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;  // lowercase only: a digest has one spelling
}

Result<std::array<uint8_t, 32>> ParseHex32(std::string_view hex, std::string_view what) {
  std::array<uint8_t, 32> out{};
  if (hex.size() != 64) {
    return Error::Make(Error::Code::kInvalidArgument,
                       std::string(what) + " is not 64 lowercase hex characters");
  }
  for (size_t i = 0; i < 32; ++i) {
    int hi = HexValue(hex[2 * i]);
    int lo = HexValue(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) {
      return Error::Make(Error::Code::kInvalidArgument,
                         std::string(what) + " is not 64 lowercase hex characters");
    }
    out[i] = static_cast<uint8_t>(hi * 16 + lo);
  }
  return out;
}

}  // namespace

std::array<uint8_t, 32> Sha256(std::string_view data) {
  std::array<uint8_t, 32> out{};
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), out.data());
  return out;
}

std::string Hex(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) {
    auto b = static_cast<uint8_t>(c);
    out += kDigits[b >> 4];
    out += kDigits[b & 15];
  }
  return out;
}

Measurement Measure(uint32_t pcr, std::string name, std::string_view content) {
  return Measurement{pcr, std::move(name), Sha256(content)};
}

Result<Measurement> MeasureImageDigest(uint32_t pcr, std::string name, std::string_view digest) {
  if (!digest.starts_with("sha256:")) {
    return Error::Make(
        Error::Code::kInvalidArgument,
        "an image digest is \"sha256:<64 hex>\", got \"" + std::string(digest) + "\"");
  }
  HS_ASSIGN_OR_RETURN(auto bytes, ParseHex32(digest.substr(7), "the image digest"));
  return Measurement{pcr, std::move(name), bytes};
}

std::string EventLogToJson(const EventLog& log) {
  boost::json::array arr;
  for (const auto& m : log) {
    arr.push_back(boost::json::object{{"pcr", m.pcr}, {"name", m.name}, {"digest", Hex(m.digest)}});
  }
  return boost::json::serialize(arr);
}

Result<EventLog> EventLogFromJson(std::string_view json) {
  boost::system::error_code ec;
  boost::json::value v = boost::json::parse(json, ec);
  if (ec || !v.is_array()) {
    return Error::Make(Error::Code::kInvalidArgument, "the event log is not a JSON array");
  }
  EventLog log;
  for (const auto& e : v.as_array()) {
    if (!e.is_object()) {
      return Error::Make(Error::Code::kInvalidArgument, "an event log entry is not an object");
    }
    const auto& o = e.as_object();
    auto pcr = jsonfield::IntField(o, "pcr");
    std::string_view name = jsonfield::StringField(o, "name");
    if (!pcr || *pcr < 0 || *pcr > 23 || name.empty()) {
      return Error::Make(Error::Code::kInvalidArgument,
                         "an event log entry lacks a PCR (0-23) or a name");
    }
    HS_ASSIGN_OR_RETURN(auto digest, ParseHex32(jsonfield::StringField(o, "digest"),
                                                "event \"" + std::string(name) + "\"'s digest"));
    log.push_back(Measurement{static_cast<uint32_t>(*pcr), std::string(name), digest});
  }
  return log;
}

}  // namespace hyperslice::runners::attest
