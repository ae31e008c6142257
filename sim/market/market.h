// Market: the provider-neutral core of the GPU marketplace simulators (sim/runpod, sim/lambda,
// sim/paperspace, sim/vast). It holds what every marketplace has — listings with prices and
// capacity, instances with a lifecycle, interruptible reclaim, a billing ledger, API keys, rate
// limits, injected faults and latency, per-method counters — and each provider's simulator maps
// its own wire API (paths, bodies, ids, error shapes) onto it.
//
// Time comes from a Clock (a FakeClock for simulated days); instance states are advanced by
// Tick(), which a background thread calls every `tick` unless Options::manual_ticks is set.
// Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include "src/base/clock.h"
#include "src/base/result.h"

namespace hyperslice::sim::market {

using MicroUsd = int64_t;  // US dollars × 1e6

// One kind of machine for sale in one place. Provider simulators choose the ids and names in their
// own vocabulary (RunPod gpuTypeId, Lambda instance type, Paperspace machine type, Vast ask id).
struct Listing {
  std::string id;        // unique within the market
  std::string gpu_name;  // the provider's spelling
  int gpu_count = 1;
  double gpu_memory_gb = 24;  // per GPU
  int vcpus = 8;
  double memory_gb = 32;
  double disk_gb = 100;
  std::string region;                  // the provider's spelling
  MicroUsd price = 0;                  // on-demand, whole machine, per hour; 0: not sold on demand
  std::optional<MicroUsd> spot_price;  // minimum bid / spot price, whole machine; none: no spot
  int capacity = 1;                    // machines of this listing that can run at once
  bool visible = true;  // false: vanished from the market (churn); creates fail with capacity
  std::map<std::string, std::string> attributes;  // provider-specific (host id, reliability...)
};

enum class State { kPending, kBooting, kRunning, kStopping, kTerminated };
const char* StateName(State s);

struct Instance {
  std::string id;  // assigned by the provider simulator's id function
  std::string name;
  std::string owner;  // the API key's account
  Listing listing;    // as bought
  bool spot = false;
  MicroUsd price = 0;  // billed per hour (on-demand price or bid)
  State state = State::kPending;
  bool reclaimed = false;  // taken back because it was interruptible (spot)
  std::map<std::string, std::string> tags;
  // What the machine boots from, as the provider received it (user_data, startup_script, image,
  // env as a JSON object, ...). sim/gpumachine boots simulated machines from it.
  boost::json::object payload;
  std::string public_ip;  // 192.0.2.x (TEST-NET-1): never dialed from the host
  // The container TCP ports the create published -> the public port the provider mapped to each
  // (RunPod `ports`, Vast `-p`). sim/gpumachine maps them on a loopback address of the machine's.
  std::map<int, int> tcp_ports;
  Clock::TimePoint created, running_since, terminated_at;
};

// One billing line: an instance's price and the seconds it was billed for so far.
struct LedgerEntry {
  std::string instance_id, listing_id, owner;
  MicroUsd price = 0;
  bool spot = false;
  double seconds = 0;
  double Cost() const { return static_cast<double>(price) * seconds / 3600.0 / 1e6; }  // USD
};

// An injected failure. What it looks like on the wire is the provider simulator's business.
struct Fault {
  enum class Kind {
    kServerError,   // 500 in the provider's shape
    kUnavailable,   // 503
    kRateLimited,   // 429 in the provider's shape, with its retry hint
    kUnauthorized,  // 401/403 in the provider's shape
    kCapacity,      // the provider's insufficient-capacity answer (creates)
    kSwallow,       // perform the request, then drop the connection without an answer
    kDrop,          // drop the connection without performing the request
  };
  Kind kind = Kind::kServerError;
  double rate = 1.0;  // probability per matching call
  int count = -1;     // how many times it may fire; -1 unlimited
};

struct Options {
  std::string provider;  // "runpod", "lambdalabs", "paperspace", "vastai" (counters, dumps)
  std::vector<Listing> listings;
  // Accounts: API key -> account name. A request whose key is not here is unauthorised.
  std::map<std::string, std::string> api_keys = {{"sim-key", "sim-account"}};
  // Lifecycle delays.
  std::chrono::milliseconds boot_delay{300};       // pending -> booting
  std::chrono::milliseconds running_delay{300};    // booting -> running
  std::chrono::milliseconds terminate_delay{200};  // stopping -> terminated
  // Billing starts when the create is accepted (as Lambda and RunPod do) and stops at terminated.
  // Rate limit per account: requests per second and burst; 0 disables.
  double rate_limit_rps = 0;
  int rate_limit_burst = 0;
  // Market churn, applied at each tick once `churn_interval` has passed: each listing's prices
  // move by up to ±churn_price_fraction; a listing vanishes/reappears with churn_vanish_rate.
  std::chrono::milliseconds churn_interval{0};  // 0: no churn
  double churn_price_fraction = 0.05;
  double churn_vanish_rate = 0.0;
  uint64_t seed = 1;
  Clock* clock = &RealClock();
  std::chrono::milliseconds tick{20};
  bool manual_ticks = false;  // tests/benches call Tick() themselves
};

// A change of an instance, for simulated machines that boot from the payload.
// Called outside the market's lock, one call at a time and in order; it may read the market (Get,
// List, Listings) but must not Create, Tick, Subscribe or Unsubscribe.
using InstanceObserver = std::function<void(const Instance&)>;

class Market {
 public:
  explicit Market(Options options);
  ~Market();
  Market(const Market&) = delete;
  Market& operator=(const Market&) = delete;

  const Options& options() const { return options_; }
  Clock& clock() { return *options_.clock; }

  // Account of an API key, or nullopt (unauthorised).
  std::optional<std::string> Authenticate(const std::string& api_key) const;
  // Rate limit for one request of `account`: nullopt to go ahead, else how long to wait.
  std::optional<std::chrono::milliseconds> Throttle(const std::string& account);

  // Counts one call of `method` (the provider's own method name, e.g. "podFindAndDeployOnDemand",
  // "POST /api/v1/instance-operations/launch"), then returns the fault to inject, if any, and
  // sleeps the injected latency for that method.
  std::optional<Fault::Kind> Enter(const std::string& method);

  std::vector<Listing> Listings() const;                            // visible ones, current prices
  std::optional<Listing> FindListing(const std::string& id) const;  // visible or not
  // Machines of a listing that could start now (capacity - running/pending ones).
  int Available(const std::string& listing_id) const;

  struct CreateSpec {
    std::string listing_id;
    std::string name;
    std::string owner;
    bool spot = false;
    std::optional<MicroUsd> bid;  // spot: whole-machine bid; must be >= spot_price
    std::map<std::string, std::string> tags;
    boost::json::object payload;
    std::vector<int> tcp_ports;  // container ports to publish; each gets a public port
  };
  enum class CreateError { kNone, kNoSuchListing, kCapacity, kBidTooLow, kNotSold };
  struct CreateResult {
    CreateError error = CreateError::kNone;
    Instance instance;  // when error == kNone
  };
  // `make_id` gives the new instance its provider-style id.
  CreateResult Create(const CreateSpec& spec, const std::function<std::string()>& make_id);

  std::optional<Instance> Get(const std::string& id) const;
  // Instances of `owner` (all owners when empty), in creation order; terminated ones stay listed
  // (with state kTerminated) so billing and tests can see them.
  std::vector<Instance> List(const std::string& owner) const;
  // Starts termination; false when there is no such instance (of that owner).
  bool Terminate(const std::string& id, const std::string& owner);
  // Takes an interruptible instance back (outbid / reclaimed); false if not spot or not running.
  bool Reclaim(const std::string& id);

  void Tick();  // advance lifecycles, churn; called by the ticker thread unless manual_ticks

  // Control-plane operations (the /control endpoint and tests).
  void SetListing(const Listing& l);  // add or replace
  void SetApiKey(const std::string& key, const std::string& account);
  bool RemoveListing(const std::string& id);
  void SetFault(const std::string& method, const Fault& fault);  // method "*" matches all
  void ClearFaults();
  void SetLatency(const std::string& method, std::chrono::milliseconds latency);  // "*" all
  std::map<std::string, int64_t> Counters() const;
  std::vector<LedgerEntry> Ledger() const;
  double TotalSpend() const;         // USD
  boost::json::object Dump() const;  // listings, instances, ledger, counters

  uint64_t Subscribe(const InstanceObserver& observer);  // first called for each live instance
  void Unsubscribe(uint64_t id);

  struct Impl;

 private:
  Options options_;
  std::unique_ptr<Impl> impl_;
};

// Serves the shared control endpoint over a Market (JSON in and out):
//   GET    /control/counters             {"<method>": N}
//   GET    /control/state                Market::Dump()
//   GET    /control/ledger               {"entries":[...],"totalUsd":x}
//   POST   /control/listings             a Listing as JSON (add or replace)
//   DELETE /control/listings/{id}
//   POST   /control/faults               {"method","kind","rate"?,"count"?}
//          kind: server_error|unavailable|rate_limited|unauthorized|capacity|swallow|drop
//   DELETE /control/faults
//   POST   /control/latency              {"method"?,"ms"}
//   POST   /control/reclaim              {"id"}
//   POST   /control/api-keys             {"key","account"}
// Returns true when it handled the request (the path starts with /control/).
struct ControlResponse {
  int status = 200;
  std::string body;
};
std::optional<ControlResponse> HandleControl(Market& market, const std::string& method,
                                             const std::string& path, const std::string& body);

// Listing <-> JSON (camelCase keys: id, gpuName, gpuCount, gpuMemoryGb, vcpus, memoryGb, diskGb,
// region, priceUsd, spotPriceUsd, capacity, visible, attributes).
boost::json::object ToJson(const Listing& l);
Result<Listing> ListingFromJson(const boost::json::value& v);
boost::json::object ToJson(const Instance& i);

}  // namespace hyperslice::sim::market
