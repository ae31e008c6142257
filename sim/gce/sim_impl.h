// The simulator's state and request handlers (one class, split over simulator.cc, api.cc,
// metadata.cc, control.cc). Everything below is guarded by SimulatorImpl::mu_; a background ticker
// thread advances time-driven state (operations, VM boot, MIG retries, long-poll deadlines).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <boost/json.hpp>

#include "sim/gce/internal.h"
#include "sim/gce/simulator.h"
#include "src/net/server.h"

namespace hyperslice::sim::gce::internal {

using SteadyTime = std::chrono::steady_clock::time_point;
using std::chrono::milliseconds;

struct Reply {
  int status = 200;
  std::string body;
  net::Headers headers;
  bool deferred = false;  // the handler kept the Responder and answers later
};

// Two fingerprints (base64 bytes) are the same bytes, whichever alphabet and padding they use.
bool SameFingerprint(std::string_view a, std::string_view b);

// An error a finished operation carries: error.errors[{code, message}].
struct OpError {
  std::string code;  // "ZONE_RESOURCE_POOL_EXHAUSTED", "RESOURCE_NOT_FOUND", ...
  std::string message;
  int http_status = 400;
};

struct Operation {
  json::object body;  // GCE's Operation JSON
  std::string key;    // "<project>/<scope path>/<name>"
  std::string method;
  SteadyTime running_at, done_at;
  bool done = false;
  std::optional<OpError> forced_error;
  // Applied once when the operation completes (under mu_); may turn it into a failure.
  std::function<std::optional<OpError>()> on_done;
};

struct OpWaiter {
  std::string op_key;
  std::shared_ptr<net::Responder> responder;
  SteadyTime deadline;
};

struct Instance {
  json::object body;
  std::string project, zone, name, mig_key, machine_type;
  std::string reservation_key;  // "<project>/<zone>/<name>" when it consumes a reservation
  SteadyTime staging_at, running_at;
  bool booting = false;
  uint64_t metadata_generation = 0;
};

struct MigMember {
  std::string name;
  json::array last_errors;  // lastAttempt.errors.errors
};

struct Mig {
  json::object body;
  std::string project, zone, name, template_key;
  std::vector<MigMember> members;
  std::deque<json::object> errors;  // listErrors, newest first
  SteadyTime next_attempt;
  bool deleting = false;
  bool bulk_in_progress = false;
  json::object bulk_last_check;
};

struct ReservationState {
  json::object body;
  std::string machine_type;
  int64_t count = 0;
};

struct Fault {
  double rate = 1.0;
  int code = 503;
  std::string reason;
  std::string message;
  int64_t remaining = -1;  // -1: unlimited
};

struct OpFailure {
  std::string code;
  std::string message;
  int64_t remaining = 1;
};

struct MetadataWaiter {
  std::string instance_key;
  std::string item;  // path below /computeMetadata/v1/, e.g. "instance/attributes/foo"
  bool recursive = false;
  bool json_alt = false;
  std::string last_etag;
  std::shared_ptr<net::Responder> responder;
  SteadyTime deadline;
};

struct DelayedReply {
  SteadyTime at;
  std::shared_ptr<net::Responder> responder;
  Reply reply;
};

// Everything `POST /control/reset` puts back.
struct State {
  std::map<std::string, json::object> templates;  // "<project>/<name>"
  std::map<std::string, json::object> policies;   // "<project>/<region>/<name>"
  std::map<std::string, Instance> instances;      // "<project>/<zone>/<name>"
  std::map<std::string, Mig> migs;                // "<project>/<zone>/<name>"
  std::map<std::string, ReservationState> reservations;
  std::map<std::string, Operation> operations;     // by key
  std::map<std::string, std::string> request_ids;  // "<project>/<requestId>" -> op key
  std::map<std::string, int64_t> capacity;         // "<zone>/<machineType>"
  std::set<std::string> stockouts;                 // "<zone>/<machineType>" or "<zone>/*"
  std::map<std::string, Fault> faults;             // by method
  std::map<std::string, milliseconds> method_latency;
  std::map<std::string, OpFailure> op_failures;
  std::map<std::string, int64_t> counters;
  milliseconds operation_latency{0}, instance_boot_latency{0};
  uint32_t next_network_host = 2;  // the next VM's 10.128.x.y, as a 16-bit host number
};

struct Ctx {
  const net::ServerRequest* req = nullptr;
  std::shared_ptr<net::Responder> responder;
  std::string method_id;
  std::string project;
  std::vector<std::string> args;  // the route's wildcard segments, in order
  json::value body;
};

class SimulatorImpl final : public Simulator {
 public:
  explicit SimulatorImpl(Options options);
  ~SimulatorImpl() override;
  Status Init();

  std::string api_endpoint() const override;
  std::string token_endpoint() const override;
  std::string metadata_endpoint() const override;
  std::string control_endpoint() const override;
  std::string metadata_host(const std::string& project, const std::string& zone,
                            const std::string& instance) const override;
  void Stop() override;
  size_t metadata_waiters() const override;
  uint64_t SubscribeInstances(InstanceObserver observer) override;
  void UnsubscribeInstances(uint64_t subscription) override;

  using Handler = Reply (SimulatorImpl::*)(Ctx&);
  struct Route {
    std::string http_method;
    std::vector<std::string> pattern;  // after /compute/v1/projects/{project}/; "*" = capture
    std::string method_id;
    Handler handler;
    bool mutation = false;
  };

 private:
  // simulator.cc: lifecycle, ticker, shared helpers.
  void Reset();  // under mu_
  void TickerLoop();
  void Tick(SteadyTime now);  // under mu_
  std::string Now3339() const;
  uint64_t NewId();
  std::string RandomSuffix(size_t n);
  std::string NewFingerprint();                    // standard base64 with padding, as GCE's look
  std::string Url(const std::string& path) const;  // api base + path
  std::string ZoneUrl(const std::string& project, const std::string& zone) const;
  std::string RegionUrl(const std::string& project, const std::string& region) const;
  bool KnownProject(const std::string& p) const;
  bool KnownZone(const std::string& z) const;
  bool KnownRegion(const std::string& r) const;
  std::vector<std::string> Zones() const;
  std::string RegionOf(const std::string& zone) const;

  // Operations.
  Operation& NewOperation(Ctx& c, const std::string& scope_kind, const std::string& scope,
                          const std::string& op_type, const std::string& target_link,
                          const std::string& target_id,
                          std::function<std::optional<OpError>()> on_done);
  void AdvanceOperation(Operation& op, SteadyTime now);
  void CompleteWaiters(const std::string& op_key);

  // MIGs and instances.
  void ReconcileMig(Mig& mig, SteadyTime now);
  bool Fits(const std::string& project, const std::string& zone, const std::string& mt,
            const std::string& reservation_key, int64_t n, std::string* why) const;
  // mig_key is "" for an instance made by instances.insert.
  Instance& CreateInstance(const std::string& project, const std::string& zone,
                           const std::string& mig_key, const std::string& name,
                           const json::object& properties, const std::string& mt,
                           const std::string& reservation_key, SteadyTime now);
  static std::string MigKey(const Mig& mig) {
    return mig.project + "/" + mig.zone + "/" + mig.name;
  }
  // "<project>/<zone>/<name>" of a SPECIFIC_RESERVATION reservationAffinity; "" otherwise.
  std::string SpecificReservationKey(const json::object& props, const std::string& project,
                                     const std::string& zone) const;
  void DeleteInstance(const std::string& key);
  json::object ManagedInstanceJson(const Mig& mig, const MigMember& m) const;
  void RefreshMigStatus(Mig& mig);
  void MetadataChanged(const std::string& instance_key);
  // Instance observation: queue an InstanceEvent for every subscriber when an instance's id or
  // status differs from what was last reported (under mu_); the ticker delivers outside mu_.
  void NoteInstance(const std::string& instance_key);
  void NoteAllInstances();
  void DeliverInstanceEvents();  // without mu_

  // api.cc
  void HandleApi(const net::ServerRequest& req, std::shared_ptr<net::Responder> r);
  void HandleToken(const net::ServerRequest& req, std::shared_ptr<net::Responder> r);
  bool Authorized(const net::ServerRequest& req);
  std::optional<ApiError> InjectedFault(const std::string& method_id);  // under mu_
  Reply ListReply(const Ctx& c, const std::string& kind, const std::string& id_path,
                  std::vector<json::object> items, const std::string& items_field = "items");
  Reply AggregatedReply(const Ctx& c, const std::string& kind, const std::string& field,
                        std::map<std::string, json::array> scoped);
  std::string Scope3(const Ctx& c, const std::string& kind, const std::string& scope,
                     const std::string& name) const;

  Reply GetProject(Ctx&);
  Reply ListZones(Ctx&);
  Reply GetZone(Ctx&);
  Reply ListRegions(Ctx&);
  Reply GetRegion(Ctx&);
  Reply GetMachineType(Ctx&);
  Reply GetNetwork(Ctx&);
  Reply ListSubnetworks(Ctx&);
  Reply GetSubnetwork(Ctx&);
  Reply ListReservations(Ctx&);
  Reply GetReservation(Ctx&);

  Reply InsertTemplate(Ctx&);
  Reply GetTemplate(Ctx&);
  Reply ListTemplates(Ctx&);
  Reply DeleteTemplate(Ctx&);
  Reply AggregatedTemplates(Ctx&);

  Reply InsertPolicy(Ctx&);
  Reply GetPolicy(Ctx&);
  Reply ListPolicies(Ctx&);
  Reply DeletePolicy(Ctx&);
  Reply AggregatedPolicies(Ctx&);

  Reply InsertMig(Ctx&);
  Reply GetMig(Ctx&);
  Reply ListMigs(Ctx&);
  Reply DeleteMig(Ctx&);
  Reply ResizeMig(Ctx&);
  Reply ListManagedInstances(Ctx&);
  Reply ListMigErrors(Ctx&);
  Reply AggregatedMigs(Ctx&);

  json::object GroupJson(const Mig& mig) const;
  Reply ListGroups(Ctx&);
  Reply GetGroup(Ctx&);
  Reply AggregatedGroups(Ctx&);
  Reply AggregatedAutoscalers(Ctx&);
  Reply EmptyZonalList(Ctx&);
  Reply EmptyRegionalList(Ctx&);

  Reply InsertInstance(Ctx&);
  Reply GetInstance(Ctx&);
  Reply ListInstances(Ctx&);
  Reply DeleteInstanceApi(Ctx&);
  Reply SetMetadata(Ctx&);
  Reply AggregatedInstances(Ctx&);

  Reply GetGlobalOp(Ctx&);
  Reply GetZoneOp(Ctx&);
  Reply GetRegionOp(Ctx&);
  Reply WaitGlobalOp(Ctx&);
  Reply WaitZoneOp(Ctx&);
  Reply WaitRegionOp(Ctx&);
  Reply ListGlobalOps(Ctx&);
  Reply ListZoneOps(Ctx&);
  Reply ListRegionOps(Ctx&);
  Reply DeleteGlobalOp(Ctx&);
  Reply DeleteZoneOp(Ctx&);
  Reply DeleteRegionOp(Ctx&);
  Reply AggregatedOps(Ctx&);
  Reply GetOp(Ctx& c, const std::string& key);
  Reply WaitOp(Ctx& c, const std::string& key);
  Reply ListOps(Ctx& c, const std::string& prefix, const std::string& id_path);
  Reply DeleteOp(Ctx& c, const std::string& key);

  // metadata.cc
  void HandleMetadata(const net::ServerRequest& req, const std::shared_ptr<net::Responder>& r);
  // Renders one metadata item for an instance; nullopt when absent. Under mu_.
  std::optional<std::string> MetadataValue(const Instance& inst, const std::string& item,
                                           bool recursive, bool json_alt, std::string* type);
  std::string IssueToken(std::chrono::seconds ttl);  // under mu_

  // control.cc
  void HandleControl(const net::ServerRequest& req, std::shared_ptr<net::Responder> r);
  json::object StateDump() const;

  const std::vector<Route>& Routes() const;

  Options options_;
  std::shared_ptr<const ApiSchema> schema_;
  std::unique_ptr<net::HttpServer> api_, metadata_, control_;
  std::string api_base_;  // "http://127.0.0.1:<port>/compute/v1/"

  mutable std::mutex mu_;
  std::condition_variable tick_cv_;
  bool stopping_ = false;
  std::thread ticker_;
  std::mt19937_64 rng_;
  State st_;
  std::vector<OpWaiter> op_waiters_;
  std::vector<MetadataWaiter> md_waiters_;
  std::vector<DelayedReply> delayed_;
  std::map<std::string, SteadyTime> tokens_;          // access token -> expiry
  std::map<std::string, ServiceAccountKey> sa_keys_;  // by key id
  std::atomic<bool> stopped_{false};

  struct Subscriber {
    InstanceObserver observer;
    std::deque<InstanceEvent> pending;
  };
  std::map<uint64_t, Subscriber> subscribers_;  // under mu_
  uint64_t next_subscription_ = 1;
  // What subscribers were last told per instance key: {id, status}. Under mu_.
  std::map<std::string, std::pair<std::string, std::string>> observed_;
  // Held while observers run, so UnsubscribeInstances can wait for them. Taken before mu_.
  std::mutex deliver_mu_;
};

}  // namespace hyperslice::sim::gce::internal
