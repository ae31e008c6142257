#include "src/kube/internal/reflector.h"

#include <algorithm>
#include <utility>

#include "src/base/log.h"
#include "src/kube/store.h"

namespace hyperslice::kube {
namespace {

// A watch ERROR event carries a metav1.Status.
Error ErrorFromStatusObject(const Object& status) {
  int64_t code = 0;
  if (const auto* c = status.if_contains("code"); c != nullptr && c->is_int64()) {
    code = c->get_int64();
  }
  std::string reason;
  if (const auto* r = status.if_contains("reason"); r != nullptr && r->is_string()) {
    reason = std::string(r->get_string());
  }
  std::string message = "watch error event";
  if (const auto* m = status.if_contains("message"); m != nullptr && m->is_string()) {
    message = std::string(m->get_string());
  }
  Error::Code ec = Error::Code::kUnknown;
  if (code == 410 || reason == "Expired" || reason == "Gone") {
    ec = Error::Code::kGone;
  } else if (code == 429 || reason == "TooManyRequests") {
    ec = Error::Code::kTooManyRequests;
  } else if (code >= 500 || reason == "InternalError" || reason == "ServiceUnavailable" ||
             reason == "Timeout") {
    ec = Error::Code::kUnavailable;
  }
  return Error::Make(ec, std::move(message), std::move(reason), static_cast<int>(code));
}

constexpr auto kShortWatch = std::chrono::seconds(1);

}  // namespace

Reflector::Reflector(std::shared_ptr<Client> client, Resource resource, ReflectorOptions options,
                     ReflectorSink* sink)
    : client_(std::move(client)),
      resource_(std::move(resource)),
      options_(std::move(options)),
      sink_(sink),
      clock_(options_.clock != nullptr ? options_.clock : &RealClock()),
      rng_(std::random_device{}()) {
  if (options_.name.empty()) options_.name = resource_.String();
  if (options_.min_watch_timeout.count() <= 0) options_.min_watch_timeout = std::chrono::seconds(1);
}

Reflector::~Reflector() { Stop(); }

void Reflector::Stop() {
  stopped_.store(true);
  std::lock_guard lock(mu_);
  if (stream_ != nullptr) stream_->Cancel();
  cv_.notify_all();
}

std::string Reflector::LastSyncResourceVersion() const {
  std::lock_guard lock(mu_);
  return last_rv_;
}

ReflectorStats Reflector::Stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

void Reflector::RecordError(const Error& e, bool list) {
  {
    std::lock_guard lock(mu_);
    if (list) {
      ++stats_.list_errors;
    } else {
      ++stats_.watch_errors;
    }
    if (e.code == Error::Code::kGone) ++stats_.gone;
    stats_.last_error = e;
  }
  log::Warn(list ? "reflector: list failed" : "reflector: watch failed",
            {{"reflector", options_.name}, {"error", e.ToString()}});
}

std::chrono::seconds Reflector::RandomWatchTimeout() {
  std::lock_guard lock(mu_);
  auto min = options_.min_watch_timeout.count();
  std::uniform_int_distribution<int64_t> dist(0, min - 1);
  return std::chrono::seconds(min + dist(rng_));
}

void Reflector::ResetBackoff() {
  std::lock_guard lock(mu_);
  backoff_next_ = std::chrono::milliseconds(0);
}

bool Reflector::Backoff() {
  std::unique_lock lock(mu_);
  const auto& b = options_.backoff;
  auto base = backoff_next_.count() > 0 ? backoff_next_ : b.initial;
  auto next =
      std::chrono::milliseconds(static_cast<int64_t>(static_cast<double>(base.count()) * b.factor));
  backoff_next_ = std::min(next, b.max);
  std::uniform_real_distribution<double> dist(0.0, std::max(0.0, b.jitter));
  auto wait = std::chrono::duration_cast<Clock::Duration>(std::chrono::duration<double, std::milli>(
      static_cast<double>(base.count()) * (1.0 + dist(rng_))));
  auto deadline = clock_->Now() + wait;
  clock_->Register(&cv_);
  while (!Stopped()) {
    if (clock_->WaitUntil(cv_, lock, deadline)) break;
  }
  clock_->Unregister(&cv_);
  return !Stopped();
}

bool Reflector::ListOnce() {
  ListOptions opts;
  opts.label_selector = options_.label_selector;
  opts.field_selector = options_.field_selector;
  opts.limit = options_.page_size;
  std::vector<ObjectPtr> items;
  std::string rv;
  do {
    auto page = client_->List(resource_, options_.ns, opts);
    if (!page.ok()) {
      // An expired continue token (410) is a failed list too: the next attempt starts over.
      RecordError(page.error(), /*list=*/true);
      return false;
    }
    if (rv.empty()) rv = page->resource_version;
    items.reserve(items.size() + page->items.size());
    for (auto& item : page->items) items.push_back(sink_->Convert(std::move(item)));
    opts.continue_token = std::move(page->continue_token);
  } while (!opts.continue_token.empty() && !Stopped());
  if (Stopped()) return false;
  log::Debug("reflector: listed", {{"reflector", options_.name},
                                   {"items", static_cast<int64_t>(items.size())},
                                   {"resourceVersion", rv}});
  sink_->Replace(std::move(items), rv);
  {
    std::lock_guard lock(mu_);
    ++stats_.lists;
    last_rv_ = rv;
  }
  ResetBackoff();
  return true;
}

Reflector::WatchOutcome Reflector::WatchOnce() {
  ListOptions opts;
  opts.label_selector = options_.label_selector;
  opts.field_selector = options_.field_selector;
  opts.resource_version = LastSyncResourceVersion();
  opts.allow_watch_bookmarks = true;
  opts.timeout_seconds = RandomWatchTimeout().count();
  const auto started = clock_->Now();

  auto watch = client_->Watch(resource_, options_.ns, opts);
  if (!watch.ok()) {
    if (Stopped()) return WatchOutcome::kStopped;
    const Error& e = watch.error();
    RecordError(e, /*list=*/false);
    if (e.code == Error::Code::kGone) return WatchOutcome::kRelist;
    if (e.Retryable()) return WatchOutcome::kBackoffResume;
    return WatchOutcome::kBackoffRelist;
  }
  std::unique_ptr<WatchStream> stream = std::move(watch).value();
  {
    std::lock_guard lock(mu_);
    if (Stopped()) return WatchOutcome::kStopped;
    stream_ = stream.get();
    ++stats_.watches;
  }
  auto outcome = WatchOutcome::kResume;
  int64_t seen = 0;
  for (;;) {
    auto next = stream->Next();
    if (!next.ok()) {
      if (Stopped()) {
        outcome = WatchOutcome::kStopped;
      } else {
        RecordError(next.error(), /*list=*/false);
        // A healthy stream that broke is resumed at once; a stream that broke before delivering
        // anything (e.g. the apiserver is going away) is resumed after a backoff.
        outcome = seen > 0 ? WatchOutcome::kResume : WatchOutcome::kBackoffResume;
      }
      break;
    }
    if (!next->has_value()) {  // the server ended the watch (timeoutSeconds)
      if (seen == 0 && clock_->Now() - started < kShortWatch) {
        RecordError(Error::Make(Error::Code::kUnavailable,
                                "very short watch: ended after less than 1s with no event"),
                    /*list=*/false);
        outcome = WatchOutcome::kBackoffResume;
      }
      break;
    }
    WatchEvent& event = **next;
    if (event.type == WatchEvent::Type::kError) {
      Error e = ErrorFromStatusObject(event.object);
      RecordError(e, /*list=*/false);
      outcome = e.code == Error::Code::kGone ? WatchOutcome::kRelist : WatchOutcome::kBackoffResume;
      break;
    }
    std::string rv(ResourceVersionOf(event.object));
    if (event.type == WatchEvent::Type::kBookmark) {
      std::lock_guard lock(mu_);
      ++stats_.bookmarks;
      if (!rv.empty()) last_rv_ = std::move(rv);
    } else {
      sink_->Apply(event.type, std::move(event.object));
      std::lock_guard lock(mu_);
      ++stats_.events;
      if (!rv.empty()) last_rv_ = std::move(rv);
    }
    if (++seen == 1) ResetBackoff();
  }
  {
    std::lock_guard lock(mu_);
    stream_ = nullptr;
  }
  return outcome;
}

void Reflector::Run() {
  bool need_list = true;
  int consecutive_gone = 0;
  while (!Stopped()) {
    if (need_list) {
      if (!ListOnce()) {
        if (!Backoff()) return;
        continue;
      }
      need_list = false;
    }
    switch (WatchOnce()) {
      case WatchOutcome::kResume:
        consecutive_gone = 0;
        break;
      case WatchOutcome::kRelist:
        // Relist at once after a first 410; back off if a fresh list is Gone again right away.
        need_list = true;
        if (++consecutive_gone > 1 && !Backoff()) return;
        break;
      case WatchOutcome::kBackoffResume:
        if (!Backoff()) return;
        break;
      case WatchOutcome::kBackoffRelist:
        need_list = true;
        if (!Backoff()) return;
        break;
      case WatchOutcome::kStopped:
        return;
    }
  }
}

}  // namespace hyperslice::kube
