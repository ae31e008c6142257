#include "src/kube/internal/watch_decoder.h"

#include <algorithm>
#include <string>
#include <utility>

#include <boost/json/monotonic_resource.hpp>
#include <boost/json/parse_options.hpp>
#include <boost/json/stream_parser.hpp>
#include <boost/json/value.hpp>

namespace hyperslice::kube {
namespace {

// Kubernetes objects nest deeply (CRD schemas); Boost.JSON's default of 32 is too low. The parser
// keeps its own stack, so a deep limit costs no native stack.
constexpr std::size_t kMaxDepth = 512;

boost::json::parse_options ParseOptions() {
  boost::json::parse_options opts;
  opts.max_depth = kMaxDepth;
  return opts;
}

bool IsJsonSpace(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

std::optional<WatchEvent::Type> ParseType(std::string_view s) {
  if (s == "ADDED") return WatchEvent::Type::kAdded;
  if (s == "MODIFIED") return WatchEvent::Type::kModified;
  if (s == "DELETED") return WatchEvent::Type::kDeleted;
  if (s == "BOOKMARK") return WatchEvent::Type::kBookmark;
  if (s == "ERROR") return WatchEvent::Type::kError;
  return std::nullopt;
}

}  // namespace

Result<WatchEvent> WatchEventFromJson(boost::json::value&& v) {
  auto* obj = v.if_object();
  if (obj == nullptr) {
    return Error::Make(Error::Code::kInvalidArgument, "watch stream: event is not a JSON object");
  }
  auto* type = obj->if_contains("type");
  if (type == nullptr || !type->is_string()) {
    return Error::Make(Error::Code::kInvalidArgument,
                       "watch stream: event has no string \"type\" field");
  }
  auto t = ParseType(type->get_string());
  if (!t) {
    std::string name(type->get_string().data(),
                     std::min<std::size_t>(type->get_string().size(), 64));
    return Error::Make(Error::Code::kInvalidArgument,
                       "watch stream: unknown event type \"" + name + "\"");
  }
  auto* object = obj->if_contains("object");
  if (object == nullptr || !object->is_object()) {
    return Error::Make(
        Error::Code::kInvalidArgument,
        std::string("watch stream: ") + WatchEventTypeName(*t) + " event has no \"object\" object");
  }
  // Move-constructed, so the object keeps the storage it was parsed into (see NextStorage).
  return WatchEvent{*t, Object(std::move(object->get_object()))};
}

WatchDecoder::WatchDecoder(size_t max_event_bytes)
    : max_event_bytes_(max_event_bytes),
      parser_(std::make_unique<boost::json::stream_parser>(boost::json::storage_ptr(),
                                                           ParseOptions())) {
  parser_->reset(NextStorage());
}

// Each event is parsed into its own monotonic arena: a few blocks instead of one malloc per JSON
// node, freed at once when the event's object dies. An informer packs (copies) the object and
// drops it right away; the profile of the operator at scale had malloc/free as a fifth of its CPU,
// much of it here. The first block is sized after the previous event.
boost::json::storage_ptr WatchDecoder::NextStorage() const {
  size_t hint = std::clamp<size_t>(last_event_bytes_ * 2, 1024, 1 << 20);
  return boost::json::make_shared_resource<boost::json::monotonic_resource>(hint);
}

WatchDecoder::~WatchDecoder() = default;

Status WatchDecoder::Fail(Error e) {
  failed_ = e;
  return e;
}

Status WatchDecoder::Emit(boost::json::value&& v) {
  auto ev = WatchEventFromJson(std::move(v));
  if (!ev.ok()) return Fail(ev.error());
  events_.push_back(std::move(ev).value());
  ++events_total_;
  return OkStatus();
}

Status WatchDecoder::Feed(std::string_view bytes) {
  if (failed_) return *failed_;
  total_bytes_ += bytes.size();
  const char* p = bytes.data();
  std::size_t n = bytes.size();
  while (n > 0) {
    if (!in_object_) {
      while (n > 0 && IsJsonSpace(*p)) {
        ++p;
        --n;
      }
      if (n == 0) break;
      if (*p != '{') {
        return Fail(Error::Make(
            Error::Code::kInvalidArgument, "watch stream: expected '{' at byte " +
                                               std::to_string(total_bytes_ - n) + ", got byte 0x" +
                                               [](unsigned char c) {
                                                 const char* hex = "0123456789abcdef";
                                                 return std::string{hex[c >> 4], hex[c & 15]};
                                               }(static_cast<unsigned char>(*p))));
      }
      in_object_ = true;
      object_bytes_ = 0;
    }
    // Never hand the parser more than one byte beyond the limit: memory stays bounded even when a
    // single chunk is huge.
    std::size_t room = max_event_bytes_ - object_bytes_ + 1;
    std::size_t take = std::min(n, room);
    boost::system::error_code ec;
    std::size_t used = 0;
    try {
      used = parser_->write_some(p, take, ec);
    } catch (const std::exception& e) {  // allocation failure and the like
      return Fail(Error::Make(Error::Code::kInvalidArgument,
                              std::string("watch stream: decoder failed: ") + e.what()));
    }
    if (ec) {
      return Fail(Error::Make(Error::Code::kInvalidArgument,
                              "watch stream: malformed JSON near byte " +
                                  std::to_string(total_bytes_ - n + used) + ": " + ec.message()));
    }
    object_bytes_ += used;
    p += used;
    n -= used;
    if (parser_->done()) {
      boost::json::value v = parser_->release();
      last_event_bytes_ = object_bytes_;
      parser_->reset(NextStorage());
      in_object_ = false;
      HS_RETURN_IF_ERROR(Emit(std::move(v)));
    } else if (object_bytes_ > max_event_bytes_) {
      return Fail(Error::Make(
          Error::Code::kInvalidArgument,
          "watch stream: event larger than " + std::to_string(max_event_bytes_) + " bytes"));
    }
  }
  return OkStatus();
}

std::optional<WatchEvent> WatchDecoder::Pop() {
  if (events_.empty()) return std::nullopt;
  WatchEvent ev = std::move(events_.front());
  events_.pop_front();
  return ev;
}

Status WatchDecoder::Finish() {
  if (failed_) return *failed_;
  if (in_object_) {
    return Fail(Error::Make(Error::Code::kUnavailable,
                            "watch stream ended mid-object (" + std::to_string(object_bytes_) +
                                " bytes of an incomplete event after " +
                                std::to_string(events_total_) + " complete events)"));
  }
  return OkStatus();
}

}  // namespace hyperslice::kube
