// WatchDecoder: incremental framing and decoding of a Kubernetes watch response body.
//
// The apiserver writes one JSON object per watch event ({"type":"ADDED","object":{...}}), each
// followed by a newline, but chunk boundaries seen by the client need not line up with objects:
// the decoder accepts the body in pieces of any size (down to one byte) and yields every complete
// event in order. It does not depend on the newlines; any JSON whitespace between objects is
// accepted, and objects may also follow each other directly.
//
// Contract:
//   - Feed() returns kInvalidArgument for a malformed stream (not JSON, a top-level value that is
//     not an object, an event without a known "type" or without an "object") and for an event
//     larger than max_event_bytes; buffering is bounded by that limit.
//   - Finish() (at the end of the body) returns kUnavailable when the body ended mid-object.
//   - After an error the decoder stays failed: every later call returns the same error.
//   - Never throws; never crashes on any input (fuzzed: test/fuzz/watch_decoder_fuzz.cc).
//
// Not thread-safe: one decoder belongs to one watch stream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string_view>

#include "src/base/result.h"
#include "src/kube/client.h"
#include "src/kube/resource.h"
#include "src/net/http.h"

namespace boost::json {
class stream_parser;
class value;
}  // namespace boost::json

namespace hyperslice::kube {

class WatchDecoder {
 public:
  static constexpr size_t kDefaultMaxEventBytes = size_t{64} << 20;  // 64 MiB

  explicit WatchDecoder(size_t max_event_bytes = kDefaultMaxEventBytes);
  ~WatchDecoder();
  WatchDecoder(const WatchDecoder&) = delete;
  WatchDecoder& operator=(const WatchDecoder&) = delete;

  // Consumes `bytes`; every event completed by them becomes available through Pop().
  Status Feed(std::string_view bytes);
  // The next decoded event, in stream order; std::nullopt when none is ready.
  std::optional<WatchEvent> Pop();
  // Declares the end of the body: an error if an object was left incomplete.
  Status Finish();

  // True while part of an object has been fed but not yet completed.
  bool InObject() const { return in_object_; }
  size_t ready() const { return events_.size(); }
  uint64_t bytes_fed() const { return total_bytes_; }
  uint64_t events_decoded() const { return events_total_; }

 private:
  Status Fail(Error e);
  Status Emit(boost::json::value&& v);

  size_t max_event_bytes_;
  boost::json::storage_ptr NextStorage() const;

  std::unique_ptr<boost::json::stream_parser> parser_;
  size_t last_event_bytes_ = 0;
  bool in_object_ = false;
  size_t object_bytes_ = 0;  // bytes of the current object fed so far
  uint64_t total_bytes_ = 0;
  uint64_t events_total_ = 0;
  std::optional<Error> failed_;
  std::deque<WatchEvent> events_;
};

// A WatchStream (client.h) over a response body: what Client::Watch returns, exposed so that
// its handling of cut and malformed bodies can be tested on any ResponseStream.
std::unique_ptr<WatchStream> NewWatchStream(
    std::unique_ptr<net::ResponseStream> body,
    size_t max_event_bytes = WatchDecoder::kDefaultMaxEventBytes);

// Converts one decoded watch event value ({"type","object"}) to a WatchEvent.
Result<WatchEvent> WatchEventFromJson(boost::json::value&& v);

}  // namespace hyperslice::kube
