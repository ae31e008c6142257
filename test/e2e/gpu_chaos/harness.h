// Pieces of the GPU chaos test (chaos_test.cc): `hyperslice operator --gpu` as a child process
// that can be killed with SIGKILL, a marketplace simulator's control endpoint, stand-in machines
// that register a Node for every running instance, and the simulators' own view of which claim
// each instance belongs to (read from the simulators, never from the operator's clients).
// Header-only; errors are returned as values or strings (no gtest dependency).
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <boost/json.hpp>

#include "sim/market/market.h"
#include "sim/market/simulator.h"
#include "src/base/json.h"
#include "src/gpu/api.h"
#include "src/gpu/claim_controller.h"
#include "src/gpu/planner.h"
#include "src/gpu/provider.h"
#include "src/kube/client.h"
#include "src/kube/object_helpers.h"
#include "src/net/http.h"
#include "test/testenv/eventually.h"

namespace hyperslice::gpu::chaos {

namespace bj = boost::json;
namespace market = sim::market;
using namespace std::chrono_literals;

// `hyperslice operator --gpu` as a child process, its output appended to one file over restarts.
class OperatorProcess {
 public:
  OperatorProcess(std::vector<std::string> args, std::string log_path)
      : args_(std::move(args)), log_path_(std::move(log_path)) {}
  OperatorProcess(const OperatorProcess&) = delete;
  OperatorProcess& operator=(const OperatorProcess&) = delete;
  ~OperatorProcess() { Kill(); }

  void Start() {
    if (pid_ > 0) return;
    std::vector<std::string> argv_strings = args_;
    pid_ = fork();
    if (pid_ == 0) {
      int fd = open(log_path_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
      dup2(fd, 1);
      dup2(fd, 2);
      std::vector<char*> argv;
      argv.reserve(argv_strings.size() + 1);
      for (auto& a : argv_strings) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    ++starts_;
  }
  // SIGKILL: no shutdown path runs (no status written, no connection closed politely).
  void Kill() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  // True while the child has not exited by itself.
  bool Alive() {
    if (pid_ <= 0) return false;
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return false;
    }
    return true;
  }
  int starts() const { return starts_; }
  std::string Log() const {
    std::ifstream in(log_path_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  std::string Tail(size_t n = 40) const {
    std::string all = Log();
    size_t pos = all.size();
    for (size_t i = 0; i <= n && pos != std::string::npos && pos > 0; ++i) {
      pos = all.rfind('\n', pos - 1);
    }
    return pos == std::string::npos ? all : all.substr(pos + 1);
  }

 private:
  std::vector<std::string> args_;
  std::string log_path_;
  pid_t pid_ = -1;
  int starts_ = 0;
};

// A plain HTTP JSON client for a simulator endpoint (its /control API, or its provider API with
// the simulator's key).
class SimHttp {
 public:
  explicit SimHttp(const std::string& base_url, std::string bearer = "")
      : bearer_(std::move(bearer)) {
    net::HttpClient::Options o;
    o.base_url = base_url;
    http_ = net::HttpClient::Create(o).value();
  }
  Result<bj::value> Call(const std::string& method, const std::string& target,
                         const bj::object* body = nullptr) {
    net::Request req;
    req.method = method;
    req.target = target;
    if (!bearer_.empty()) req.headers.emplace_back("Authorization", "Bearer " + bearer_);
    if (body != nullptr) {
      req.body = bj::serialize(*body);
      req.headers.emplace_back("Content-Type", "application/json");
    }
    HS_ASSIGN_OR_RETURN(auto resp, http_->Do(req));
    if (resp.status != 200) {
      return Error::Make(Error::Code::kInternal, method + " " + target + ": " +
                                                     std::to_string(resp.status) + " " + resp.body);
    }
    boost::system::error_code ec;
    bj::value v = bj::parse(resp.body, ec);
    if (ec) return Error::Make(Error::Code::kInternal, target + ": answer is not JSON");
    return v;
  }

 private:
  std::string bearer_;
  std::shared_ptr<net::HttpClient> http_;
};

// "%2F" and ":2f" style escapes back to bytes (`escape` is '%' or ':'); an invalid escape is
// kept as it is.
inline std::string Unescape(std::string_view s, char escape) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == escape && i + 2 < s.size() && std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
      out += static_cast<char>(std::stoi(std::string(s.substr(i + 1, 2)), nullptr, 16));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

// One instance as the simulator holds it, with the claim it belongs to by its tags.
struct SimInstance {
  std::string provider;
  std::string id;
  std::string name;
  std::string claim_uid;  // the tgp.io/claim-uid tag; "" when the simulator shows none
  std::string cluster;    // the tgp.io/cluster tag
  bool live = false;      // not stopping or terminated
  market::State state = market::State::kPending;
};

// Reads instances and their tags from one simulator: Lambda stores the launch's tags with the
// instance (keys escaped as the Lambda client must send them, ":2f" for "/"); Paperspace has no
// machine tags, so the tags are the name of the machine's startup script ("hyperslice:k=v,...",
// percent-encoded), read through the simulator's own /v1/startup-scripts.
class SimView {
 public:
  SimView(std::string provider, market::MarketSimulator* sim)
      : provider_(std::move(provider)), sim_(sim), api_(sim->api_endpoint(), "sim-key") {}

  const std::string& provider() const { return provider_; }
  market::MarketSimulator& sim() { return *sim_; }

  // Every instance the market ever held (terminated ones too). Tags seen once are remembered
  // (a Paperspace script goes with its machine).
  Result<std::vector<SimInstance>> Instances() {
    std::map<std::string, std::map<std::string, std::string>> script_tags;  // machine id -> tags
    if (provider_ == kPaperspace) {
      std::string after;
      for (int page = 0; page < 100; ++page) {
        std::string target = "/v1/startup-scripts?limit=120";
        if (!after.empty()) target += "&after=" + after;
        HS_ASSIGN_OR_RETURN(bj::value v, api_.Call("GET", target));
        const bj::object* o = v.if_object();
        const bj::array* items = o ? jsonfield::ArrayField(*o, "items") : nullptr;
        if (items == nullptr) return Error::Make(Error::Code::kInternal, "scripts: no items");
        for (const bj::value& s : *items) {
          if (!s.is_object()) continue;
          std::string name(jsonfield::StringField(s.get_object(), "name"));
          if (name.rfind("hyperslice:", 0) != 0) continue;
          std::map<std::string, std::string> tags;
          std::string body = name.substr(11);
          size_t start = 0;
          while (start <= body.size()) {
            size_t comma = body.find(',', start);
            std::string kv =
                body.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
            if (size_t eq = kv.find('='); eq != std::string::npos) {
              tags[Unescape(kv.substr(0, eq), '%')] = Unescape(kv.substr(eq + 1), '%');
            }
            if (comma == std::string::npos) break;
            start = comma + 1;
          }
          if (const bj::array* ids = jsonfield::ArrayField(s.get_object(), "assignedMachineIds")) {
            for (const bj::value& id : *ids) {
              if (id.is_string()) script_tags[std::string(id.get_string())] = tags;
            }
          }
        }
        const bj::value* next = o->if_contains("nextPage");
        if (next == nullptr || !next->is_string()) break;
        after = std::string(next->get_string());
      }
    }
    std::vector<SimInstance> out;
    std::lock_guard lock(mu_);
    for (const market::Instance& i : sim_->market().List("")) {
      std::map<std::string, std::string> tags;
      if (provider_ == kPaperspace) {
        if (auto it = script_tags.find(i.id); it != script_tags.end()) tags = it->second;
      } else {
        for (const auto& [k, v] : i.tags) tags[Unescape(k, ':')] = v;
      }
      auto& known = tags_[i.id];
      if (!tags.empty()) known = tags;
      SimInstance s;
      s.provider = provider_;
      s.id = i.id;
      s.name = i.name;
      s.state = i.state;
      s.live = i.state != market::State::kTerminated && i.state != market::State::kStopping;
      if (auto u = known.find(kTagClaimUid); u != known.end()) s.claim_uid = u->second;
      if (auto c = known.find(kTagCluster); c != known.end()) s.cluster = c->second;
      out.push_back(std::move(s));
    }
    return out;
  }

 private:
  std::string provider_;
  market::MarketSimulator* sim_;
  SimHttp api_;
  std::mutex mu_;
  std::map<std::string, std::map<std::string, std::string>> tags_;  // instance id -> last tags
};

// Stand-in machines: every instance that turns running registers a Node with the claim's
// providerID (with the registration taint), Ready with its GPUs allocatable — what issue 3/4's
// machines do after booting — and the not-ready taint the apiserver put on it is removed (the
// node lifecycle controller's job; kube-controller-manager does not run here).
class StandInNodes {
 public:
  explicit StandInNodes(std::shared_ptr<kube::Client> client) : client_(std::move(client)) {}
  ~StandInNodes() { Stop(); }

  void Watch(const std::string& provider, market::Market& m) {
    uint64_t id = m.Subscribe([this, provider](const market::Instance& i) {
      if (i.state != market::State::kRunning) return;
      std::lock_guard lock(mu_);
      if (stop_ || !registered_.insert(provider + "/" + i.id).second) return;
      threads_.emplace_back([this, provider, i] { Register(provider, i); });
    });
    subs_.emplace_back(&m, id);
  }
  void Stop() {
    for (auto& [m, id] : subs_) m->Unsubscribe(id);
    subs_.clear();
    std::vector<std::thread> threads;
    {
      std::lock_guard lock(mu_);
      stop_ = true;
      threads.swap(threads_);
    }
    for (auto& t : threads) t.join();
  }

 private:
  void Register(const std::string& provider, const market::Instance& i) {
    std::string name = (provider == kLambda ? "ll-" : "ps-") + i.id;
    for (char& c : name) {
      auto u = static_cast<unsigned char>(c);
      c = std::isalnum(u) != 0 ? static_cast<char>(std::tolower(u)) : '-';
    }
    bj::object node{
        {"apiVersion", "v1"},
        {"kind", "Node"},
        {"metadata", bj::object{{"name", name}}},
        {"spec", bj::object{{"providerID", provider + "://" + i.id},
                            {"taints", bj::array{bj::object{{"key", kTaintUnregistered},
                                                            {"value", "true"},
                                                            {"effect", "NoExecute"}}}}}}};
    if (!testenv::Eventually(
            [&] {
              auto c = client_->Create(kube::resources::Nodes(), "", node);
              return c.ok() || c.error().code == Error::Code::kAlreadyExists;
            },
            30s, 200ms)) {
      return;
    }
    bj::object resources{{kResourceGpu, std::to_string(i.listing.gpu_count)},
                         {"cpu", "16"},
                         {"memory", "64Gi"},
                         {"pods", "110"}};
    auto now = kube::FormatTime(std::chrono::system_clock::now());
    bj::object status{
        {"capacity", resources},
        {"allocatable", resources},
        {"addresses", bj::array{bj::object{{"type", "InternalIP"}, {"address", "127.0.0.1"}}}},
        {"conditions", bj::array{bj::object{{"type", "Ready"},
                                            {"status", "True"},
                                            {"reason", "KubeletReady"},
                                            {"message", "stand-in machine"},
                                            {"lastHeartbeatTime", now},
                                            {"lastTransitionTime", now}}}}};
    kube::PatchOptions po;
    po.subresource = "status";
    (void)testenv::Eventually(
        [&] {
          return client_
              ->Patch(kube::resources::Nodes(), "", name, kube::PatchType::kMerge,
                      bj::serialize(bj::object{{"status", status}}), po)
              .ok();
        },
        30s, 200ms);
    // The not-ready taint goes against the version read (the claim controller edits taints too).
    (void)testenv::Eventually(
        [&] {
          auto n = client_->Get(kube::resources::Nodes(), "", name);
          if (!n.ok()) return n.error().code == Error::Code::kNotFound;
          bj::array kept;
          bool had = false;
          if (const bj::object* spec = jsonfield::ObjectField(*n, "spec")) {
            if (const bj::array* t = jsonfield::ArrayField(*spec, "taints")) {
              for (const auto& taint : *t) {
                if (taint.is_object() && jsonfield::StringField(taint.get_object(), "key") ==
                                             "node.kubernetes.io/not-ready") {
                  had = true;
                } else {
                  kept.push_back(taint);
                }
              }
            }
          }
          if (!had) return true;
          (*n)["spec"].as_object()["taints"] = std::move(kept);
          return client_->Update(kube::resources::Nodes(), "", *n).ok();
        },
        30s, 100ms);
  }

  std::shared_ptr<kube::Client> client_;
  std::vector<std::pair<market::Market*, uint64_t>> subs_;
  std::mutex mu_;
  bool stop_ = false;
  std::set<std::string> registered_;
  std::vector<std::thread> threads_;
};

}  // namespace hyperslice::gpu::chaos
