#include "sim/market/market.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <random>
#include <thread>

#include <boost/json.hpp>

namespace hyperslice::sim::market {

namespace json = boost::json;
using Ms = std::chrono::milliseconds;

const char* StateName(State s) {
  switch (s) {
    case State::kPending:
      return "pending";
    case State::kBooting:
      return "booting";
    case State::kRunning:
      return "running";
    case State::kStopping:
      return "stopping";
    case State::kTerminated:
      return "terminated";
  }
  return "unknown";
}

struct Market::Impl {
  explicit Impl(const Options& o) : rng(o.seed) {}

  mutable std::mutex mu;
  std::map<std::string, Listing> listings;  // by id, in id order
  std::map<std::string, std::string> api_keys;
  std::map<std::string, Instance> instances;
  std::vector<std::string> instance_order;  // creation order, for stable listings
  std::map<std::string, int64_t> counters;
  struct FaultSlot {
    Fault fault;
    int fired = 0;
  };
  std::map<std::string, FaultSlot> faults;  // by method ("*" = all)
  std::map<std::string, Ms> latency;        // by method ("*" = all)
  struct Bucket {
    double tokens = 0;
    Clock::TimePoint refilled{};
    bool init = false;
  };
  std::map<std::string, Bucket> buckets;  // by account
  std::mt19937_64 rng;
  Clock::TimePoint last_churn{};
  uint64_t next_subscription = 1;
  std::map<uint64_t, InstanceObserver> observers;
  std::vector<Instance> pending_events;  // collected under mu, delivered outside it
  std::mutex deliver_mu;                 // one delivery at a time, in order

  // Ticker thread.
  std::thread ticker;
  std::mutex tick_mu;
  std::condition_variable tick_cv;
  bool stop = false;

  double Uniform() { return std::uniform_real_distribution<double>(0, 1)(rng); }

  int Busy(const std::string& listing_id) const {
    int n = 0;
    for (const auto& [id, inst] : instances) {
      if (inst.listing.id == listing_id && inst.state != State::kTerminated) n++;
    }
    return n;
  }

  void Changed(const Instance& inst) {
    if (!observers.empty()) pending_events.push_back(inst);
  }

  // Moves every instance along its lifecycle to where `now` puts it.
  void Advance(const Options& o, Clock::TimePoint now) {
    for (auto& [id, inst] : instances) {
      State before = inst.state;
      if (inst.state == State::kPending && now >= inst.created + o.boot_delay) {
        inst.state = State::kBooting;
      }
      if (inst.state == State::kBooting && now >= inst.created + o.boot_delay + o.running_delay) {
        inst.state = State::kRunning;
        inst.running_since = inst.created + o.boot_delay + o.running_delay;
      }
      if (inst.state == State::kStopping && now >= inst.terminated_at) {
        inst.state = State::kTerminated;
      }
      if (inst.state != before) Changed(inst);
    }
  }

  void Churn(const Options& o, Clock::TimePoint now) {
    if (o.churn_interval.count() <= 0) return;
    if (last_churn == Clock::TimePoint{}) last_churn = now;
    if (now - last_churn < o.churn_interval) return;
    last_churn = now;
    for (auto& [id, l] : listings) {
      auto move = [&](MicroUsd p) {
        double f = 1.0 + (Uniform() * 2 - 1) * o.churn_price_fraction;
        return std::max<MicroUsd>(1, static_cast<MicroUsd>(static_cast<double>(p) * f));
      };
      if (l.price > 0) l.price = move(l.price);
      if (l.spot_price) l.spot_price = move(*l.spot_price);
      if (o.churn_vanish_rate > 0 && Uniform() < o.churn_vanish_rate) l.visible = !l.visible;
    }
  }
};

Market::Market(Options options)
    : options_(std::move(options)), impl_(std::make_unique<Impl>(options_)) {
  for (const auto& l : options_.listings) impl_->listings[l.id] = l;
  impl_->api_keys = options_.api_keys;
  if (!options_.manual_ticks) {
    impl_->ticker = std::thread([this] {
      std::unique_lock lock(impl_->tick_mu);
      while (!impl_->stop) {
        impl_->tick_cv.wait_for(lock, options_.tick, [this] { return impl_->stop; });
        if (impl_->stop) break;
        lock.unlock();
        Tick();
        lock.lock();
      }
    });
  }
}

Market::~Market() {
  {
    std::lock_guard lock(impl_->tick_mu);
    impl_->stop = true;
  }
  impl_->tick_cv.notify_all();
  if (impl_->ticker.joinable()) impl_->ticker.join();
}

std::optional<std::string> Market::Authenticate(const std::string& api_key) const {
  std::lock_guard lock(impl_->mu);
  auto it = impl_->api_keys.find(api_key);
  if (api_key.empty() || it == impl_->api_keys.end()) return std::nullopt;
  return it->second;
}

std::optional<Ms> Market::Throttle(const std::string& account) {
  if (options_.rate_limit_rps <= 0) return std::nullopt;
  std::lock_guard lock(impl_->mu);
  auto now = options_.clock->Now();
  auto& b = impl_->buckets[account];
  double burst = std::max(1, options_.rate_limit_burst);
  if (!b.init) {
    b = {burst, now, true};
  }
  double elapsed = std::chrono::duration<double>(now - b.refilled).count();
  b.tokens = std::min(burst, b.tokens + elapsed * options_.rate_limit_rps);
  b.refilled = now;
  if (b.tokens >= 1) {
    b.tokens -= 1;
    return std::nullopt;
  }
  double wait_s = (1 - b.tokens) / options_.rate_limit_rps;
  return Ms(static_cast<int64_t>(wait_s * 1000) + 1);
}

std::optional<Fault::Kind> Market::Enter(const std::string& method) {
  Ms delay{0};
  std::optional<Fault::Kind> out;
  {
    std::lock_guard lock(impl_->mu);
    impl_->counters[method]++;
    for (const char* key : {method.c_str(), "*"}) {
      auto lit = impl_->latency.find(key);
      if (lit != impl_->latency.end()) {
        delay = lit->second;
        break;
      }
    }
    for (const char* key : {method.c_str(), "*"}) {
      auto it = impl_->faults.find(key);
      if (it == impl_->faults.end()) continue;
      auto& slot = it->second;
      if (slot.fault.count >= 0 && slot.fired >= slot.fault.count) continue;
      if (impl_->Uniform() < slot.fault.rate) {
        slot.fired++;
        out = slot.fault.kind;
        break;
      }
    }
  }
  // Injected latency is wall time even with a fake clock: it models the network, and tests that
  // use it want the client's timeouts to see it.
  if (delay.count() > 0) std::this_thread::sleep_for(delay);
  return out;
}

std::vector<Listing> Market::Listings() const {
  std::lock_guard lock(impl_->mu);
  std::vector<Listing> out;
  for (const auto& [id, l] : impl_->listings) {
    if (l.visible) out.push_back(l);
  }
  return out;
}

std::optional<Listing> Market::FindListing(const std::string& id) const {
  std::lock_guard lock(impl_->mu);
  auto it = impl_->listings.find(id);
  if (it == impl_->listings.end()) return std::nullopt;
  return it->second;
}

int Market::Available(const std::string& listing_id) const {
  std::lock_guard lock(impl_->mu);
  auto it = impl_->listings.find(listing_id);
  if (it == impl_->listings.end() || !it->second.visible) return 0;
  return std::max(0, it->second.capacity - impl_->Busy(listing_id));
}

Market::CreateResult Market::Create(const CreateSpec& spec,
                                    const std::function<std::string()>& make_id) {
  CreateResult r;
  std::vector<Instance> events;
  {
    std::lock_guard lock(impl_->mu);
    auto it = impl_->listings.find(spec.listing_id);
    if (it == impl_->listings.end()) {
      r.error = CreateError::kNoSuchListing;
      return r;
    }
    const Listing& l = it->second;
    if (!l.visible || impl_->Busy(l.id) >= l.capacity) {
      r.error = CreateError::kCapacity;
      return r;
    }
    MicroUsd price = l.price;
    if (spec.spot) {
      if (!l.spot_price) {
        r.error = CreateError::kNotSold;
        return r;
      }
      MicroUsd bid = spec.bid.value_or(*l.spot_price);
      if (bid < *l.spot_price) {
        r.error = CreateError::kBidTooLow;
        return r;
      }
      price = bid;
    } else if (l.price <= 0) {
      r.error = CreateError::kNotSold;
      return r;
    }
    Instance inst;
    inst.id = make_id();
    inst.name = spec.name;
    inst.owner = spec.owner;
    inst.listing = l;
    inst.spot = spec.spot;
    inst.price = price;
    inst.tags = spec.tags;
    inst.payload = spec.payload;
    inst.created = options_.clock->Now();
    size_t n = impl_->instance_order.size() + 1;
    inst.public_ip = "192.0.2." + std::to_string(1 + (n % 254));
    // A public port per published container port, as providers pick them: not the container's.
    for (int port : spec.tcp_ports) {
      inst.tcp_ports[port] =
          10000 +
          static_cast<int>(std::hash<std::string>{}(inst.id + "/" + std::to_string(port)) % 50000);
    }
    impl_->instances[inst.id] = inst;
    impl_->instance_order.push_back(inst.id);
    impl_->Changed(inst);
    events.swap(impl_->pending_events);
    r.instance = inst;
  }
  if (!events.empty()) {
    std::lock_guard d(impl_->deliver_mu);
    std::map<uint64_t, InstanceObserver> obs;
    {
      std::lock_guard lock(impl_->mu);
      obs = impl_->observers;
    }
    for (const auto& e : events) {
      for (auto& [id, fn] : obs) fn(e);
    }
  }
  return r;
}

std::optional<Instance> Market::Get(const std::string& id) const {
  std::lock_guard lock(impl_->mu);
  auto it = impl_->instances.find(id);
  if (it == impl_->instances.end()) return std::nullopt;
  return it->second;
}

std::vector<Instance> Market::List(const std::string& owner) const {
  std::lock_guard lock(impl_->mu);
  std::vector<Instance> out;
  for (const auto& id : impl_->instance_order) {
    auto it = impl_->instances.find(id);
    if (it == impl_->instances.end()) continue;
    if (owner.empty() || it->second.owner == owner) out.push_back(it->second);
  }
  return out;
}

bool Market::Terminate(const std::string& id, const std::string& owner) {
  std::lock_guard lock(impl_->mu);
  auto it = impl_->instances.find(id);
  if (it == impl_->instances.end()) return false;
  Instance& inst = it->second;
  if (!owner.empty() && inst.owner != owner) return false;
  if (inst.state == State::kStopping || inst.state == State::kTerminated) return true;
  inst.state = State::kStopping;
  inst.terminated_at = options_.clock->Now() + options_.terminate_delay;
  impl_->Changed(inst);
  return true;
}

bool Market::Reclaim(const std::string& id) {
  std::lock_guard lock(impl_->mu);
  auto it = impl_->instances.find(id);
  if (it == impl_->instances.end()) return false;
  Instance& inst = it->second;
  if (!inst.spot || inst.state == State::kStopping || inst.state == State::kTerminated) {
    return false;
  }
  inst.reclaimed = true;
  inst.state = State::kStopping;
  inst.terminated_at = options_.clock->Now() + options_.terminate_delay;
  impl_->Changed(inst);
  return true;
}

void Market::Tick() {
  std::vector<Instance> events;
  std::map<uint64_t, InstanceObserver> obs;
  std::lock_guard d(impl_->deliver_mu);
  {
    std::lock_guard lock(impl_->mu);
    auto now = options_.clock->Now();
    impl_->Advance(options_, now);
    impl_->Churn(options_, now);
    events.swap(impl_->pending_events);
    if (!events.empty()) obs = impl_->observers;
  }
  for (const auto& e : events) {
    for (auto& [id, fn] : obs) fn(e);
  }
}

void Market::SetApiKey(const std::string& key, const std::string& account) {
  std::lock_guard lock(impl_->mu);
  impl_->api_keys[key] = account;
}

void Market::SetListing(const Listing& l) {
  std::lock_guard lock(impl_->mu);
  impl_->listings[l.id] = l;
}

bool Market::RemoveListing(const std::string& id) {
  std::lock_guard lock(impl_->mu);
  return impl_->listings.erase(id) > 0;
}

void Market::SetFault(const std::string& method, const Fault& fault) {
  std::lock_guard lock(impl_->mu);
  impl_->faults[method] = {fault, 0};
}

void Market::ClearFaults() {
  std::lock_guard lock(impl_->mu);
  impl_->faults.clear();
}

void Market::SetLatency(const std::string& method, Ms latency) {
  std::lock_guard lock(impl_->mu);
  if (latency.count() <= 0) {
    impl_->latency.erase(method);
  } else {
    impl_->latency[method] = latency;
  }
}

std::map<std::string, int64_t> Market::Counters() const {
  std::lock_guard lock(impl_->mu);
  return impl_->counters;
}

std::vector<LedgerEntry> Market::Ledger() const {
  std::lock_guard lock(impl_->mu);
  auto now = options_.clock->Now();
  std::vector<LedgerEntry> out;
  for (const auto& id : impl_->instance_order) {
    const Instance& inst = impl_->instances.at(id);
    LedgerEntry e;
    e.instance_id = inst.id;
    e.listing_id = inst.listing.id;
    e.owner = inst.owner;
    e.price = inst.price;
    e.spot = inst.spot;
    // Billed from acceptance until terminated (or now).
    auto end = (inst.state == State::kStopping || inst.state == State::kTerminated)
                   ? std::min(inst.terminated_at, now)
                   : now;
    e.seconds = std::max(0.0, std::chrono::duration<double>(end - inst.created).count());
    out.push_back(e);
  }
  return out;
}

double Market::TotalSpend() const {
  double total = 0;
  for (const auto& e : Ledger()) total += e.Cost();
  return total;
}

json::object ToJson(const Listing& l) {
  json::object o;
  o["id"] = l.id;
  o["gpuName"] = l.gpu_name;
  o["gpuCount"] = l.gpu_count;
  o["gpuMemoryGb"] = l.gpu_memory_gb;
  o["vcpus"] = l.vcpus;
  o["memoryGb"] = l.memory_gb;
  o["diskGb"] = l.disk_gb;
  o["region"] = l.region;
  o["priceUsd"] = static_cast<double>(l.price) / 1e6;
  if (l.spot_price) o["spotPriceUsd"] = static_cast<double>(*l.spot_price) / 1e6;
  o["capacity"] = l.capacity;
  o["visible"] = l.visible;
  json::object attrs;
  for (const auto& [k, v] : l.attributes) attrs[k] = v;
  o["attributes"] = std::move(attrs);
  return o;
}

namespace {

MicroUsd Micro(double usd) { return static_cast<MicroUsd>(usd * 1e6 + (usd >= 0 ? 0.5 : -0.5)); }

std::optional<double> Number(const json::object& o, std::string_view key) {
  auto it = o.find(key);
  if (it == o.end()) return std::nullopt;
  if (it->value().is_double()) return it->value().get_double();
  if (it->value().is_int64()) return static_cast<double>(it->value().get_int64());
  if (it->value().is_uint64()) return static_cast<double>(it->value().get_uint64());
  return std::nullopt;
}

}  // namespace

Result<Listing> ListingFromJson(const json::value& v) {
  auto bad = [](std::string m) { return Error::Make(Error::Code::kInvalidArgument, std::move(m)); };
  if (!v.is_object()) return bad("a listing is a JSON object");
  const auto& o = v.get_object();
  Listing l;
  auto str = [&](std::string_view k, std::string* out) {
    if (auto it = o.find(k); it != o.end() && it->value().is_string()) {
      *out = std::string(it->value().get_string());
    }
  };
  str("id", &l.id);
  if (l.id.empty()) return bad("listing: id is required");
  str("gpuName", &l.gpu_name);
  str("region", &l.region);
  if (auto n = Number(o, "gpuCount")) l.gpu_count = static_cast<int>(*n);
  if (auto n = Number(o, "gpuMemoryGb")) l.gpu_memory_gb = *n;
  if (auto n = Number(o, "vcpus")) l.vcpus = static_cast<int>(*n);
  if (auto n = Number(o, "memoryGb")) l.memory_gb = *n;
  if (auto n = Number(o, "diskGb")) l.disk_gb = *n;
  if (auto n = Number(o, "priceUsd")) l.price = Micro(*n);
  if (auto n = Number(o, "spotPriceUsd")) l.spot_price = Micro(*n);
  if (auto n = Number(o, "capacity")) l.capacity = static_cast<int>(*n);
  if (auto it = o.find("visible"); it != o.end() && it->value().is_bool()) {
    l.visible = it->value().get_bool();
  }
  if (auto it = o.find("attributes"); it != o.end() && it->value().is_object()) {
    for (const auto& [k, val] : it->value().get_object()) {
      if (val.is_string()) l.attributes[std::string(k)] = std::string(val.get_string());
    }
  }
  if (l.gpu_count < 0 || l.capacity < 0 || l.price < 0) return bad("listing: negative value");
  return l;
}

json::object ToJson(const Instance& i) {
  json::object o;
  o["id"] = i.id;
  o["name"] = i.name;
  o["owner"] = i.owner;
  o["listingId"] = i.listing.id;
  o["gpuName"] = i.listing.gpu_name;
  o["gpuCount"] = i.listing.gpu_count;
  o["region"] = i.listing.region;
  o["spot"] = i.spot;
  o["priceUsd"] = static_cast<double>(i.price) / 1e6;
  o["state"] = StateName(i.state);
  o["reclaimed"] = i.reclaimed;
  json::object tags;
  for (const auto& [k, v] : i.tags) tags[k] = v;
  o["tags"] = std::move(tags);
  o["payload"] = i.payload;
  o["publicIp"] = i.public_ip;
  json::object ports;
  for (const auto& [port, public_port] : i.tcp_ports) ports[std::to_string(port)] = public_port;
  o["tcpPorts"] = std::move(ports);
  return o;
}

json::object Market::Dump() const {
  json::object out;
  out["provider"] = options_.provider;
  json::array listings;
  {
    std::lock_guard lock(impl_->mu);
    for (const auto& [id, l] : impl_->listings) listings.push_back(ToJson(l));
  }
  out["listings"] = std::move(listings);
  json::array instances;
  for (const auto& i : List("")) instances.push_back(ToJson(i));
  out["instances"] = std::move(instances);
  json::object counters;
  for (const auto& [k, v] : Counters()) counters[k] = v;
  out["counters"] = std::move(counters);
  out["totalSpendUsd"] = TotalSpend();
  return out;
}

uint64_t Market::Subscribe(const InstanceObserver& observer) {
  std::lock_guard d(impl_->deliver_mu);
  uint64_t id;
  std::vector<Instance> live;
  {
    std::lock_guard lock(impl_->mu);
    id = impl_->next_subscription++;
    impl_->observers[id] = observer;
    for (const auto& iid : impl_->instance_order) live.push_back(impl_->instances.at(iid));
  }
  for (const auto& i : live) observer(i);
  return id;
}

void Market::Unsubscribe(uint64_t id) {
  std::lock_guard d(impl_->deliver_mu);
  std::lock_guard lock(impl_->mu);
  impl_->observers.erase(id);
}

}  // namespace hyperslice::sim::market
