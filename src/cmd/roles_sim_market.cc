// `hyperslice sim runpod|lambda|paperspace|vast`: the GPU marketplace simulators (sim/<name>) as
// processes, for tests, `hyperslice dev` and the providers' own clients. Each prints
// {"provider","api","control"} as one JSON line on stdout, then serves until SIGTERM/SIGINT.
//
// This file includes sim/: the `sim` and `dev` roles of the composition root are the one place in
// src/ that knows the simulators (docs/architecture.md, "Rules that keep this order true").
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <boost/json.hpp>

#include "sim/lambda/simulator.h"
#include "sim/paperspace/simulator.h"
#include "sim/runpod/simulator.h"
#include "sim/vast/simulator.h"
#include "src/base/files.h"
#include "src/base/log.h"
#include "src/cmd/roles.h"

namespace hyperslice::cmd {
namespace {

using StartFn =
    Result<std::unique_ptr<sim::market::MarketSimulator>> (*)(sim::market::ServerOptions);

struct MarketSim {
  const char* command;
  const char* provider;  // GPUNodeClass providers[].name
  const char* help;
  StartFn start;
};

constexpr MarketSim kMarketSims[] = {
    {"runpod", "runpod", "RunPod GraphQL API simulator (/graphql)", &sim::runpod::Start},
    {"lambda", "lambdalabs", "Lambda Cloud API simulator (/api/v1)", &sim::lambda::Start},
    {"paperspace", "paperspace", "Paperspace API simulator", &sim::paperspace::Start},
    {"vast", "vastai", "Vast.ai API simulator (/api/v0)", &sim::vast::Start},
};

struct MarketFlags {
  std::map<std::string, CLI::App*> commands;
  std::string address = "127.0.0.1";
  uint16_t api_port = 0, control_port = 0;
  std::vector<std::string> api_keys;  // "<key>" or "<key>=<account>"
  std::string listings_file;          // JSON array of listings (sim/market/market.h ToJson)
  int boot_ms = 300, running_ms = 300, terminate_ms = 200;
  double rate_limit_rps = 0;
  int rate_limit_burst = 0;
  int churn_ms = 0;
  double churn_price_fraction = 0.05, churn_vanish_rate = 0;
  uint64_t seed = 1;
  int threads = 4;
};

MarketFlags& Flags() {
  static MarketFlags f;
  return f;
}

}  // namespace

void SetupMarketSims(CLI::App& sim) {
  MarketFlags& f = Flags();
  for (const auto& m : kMarketSims) {
    CLI::App* c = sim.add_subcommand(m.command, m.help);
    f.commands[m.command] = c;
    c->add_option("--address", f.address, "listen address (loopback)")->capture_default_str();
    c->add_option("--api-port", f.api_port, "API port (0: any free port)")->capture_default_str();
    c->add_option("--control-port", f.control_port, "control endpoint port (0: any free port)")
        ->capture_default_str();
    c->add_option("--api-key", f.api_keys,
                  "an API key the simulator accepts, <key> or <key>=<account> (repeatable; "
                  "default sim-key)");
    c->add_option("--listings-file", f.listings_file,
                  "JSON array of listings to sell instead of the default market");
    c->add_option("--boot-ms", f.boot_ms, "time from accepted to booting")->capture_default_str();
    c->add_option("--running-ms", f.running_ms, "time from booting to running")
        ->capture_default_str();
    c->add_option("--terminate-ms", f.terminate_ms, "time from terminating to terminated")
        ->capture_default_str();
    c->add_option("--rate-limit-rps", f.rate_limit_rps,
                  "requests per second per account before 429 (0: none)")
        ->capture_default_str();
    c->add_option("--rate-limit-burst", f.rate_limit_burst, "burst of the rate limit")
        ->capture_default_str();
    c->add_option("--churn-ms", f.churn_ms, "how often prices move and offers vanish (0: never)")
        ->capture_default_str();
    c->add_option("--churn-price-fraction", f.churn_price_fraction,
                  "largest relative price move per churn")
        ->capture_default_str();
    c->add_option("--churn-vanish-rate", f.churn_vanish_rate,
                  "probability per churn that an offer vanishes or comes back")
        ->capture_default_str();
    c->add_option("--threads", f.threads, "API server threads")->capture_default_str();
    c->add_option("--seed", f.seed, "seed of churn and fault injection")->capture_default_str();
  }
}

// Returns -1 when no marketplace simulator was chosen.
int RunMarketSim() {
  MarketFlags& f = Flags();
  const MarketSim* chosen = nullptr;
  for (const auto& m : kMarketSims) {
    if (f.commands[m.command]->parsed()) chosen = &m;
  }
  if (chosen == nullptr) return -1;
  sim::market::ServerOptions o;
  o.address = f.address;
  o.api_port = f.api_port;
  o.control_port = f.control_port;
  o.threads = f.threads;
  auto& mo = o.market;
  if (!f.api_keys.empty()) {
    mo.api_keys.clear();
    for (const auto& k : f.api_keys) {
      auto eq = k.find('=');
      mo.api_keys[k.substr(0, eq)] = eq == std::string::npos ? "sim-account" : k.substr(eq + 1);
    }
  }
  if (!f.listings_file.empty()) {
    boost::system::error_code ec;
    auto v = boost::json::parse(ReadFileOrEmpty(f.listings_file), ec);
    if (ec || !v.is_array()) {
      std::fprintf(stderr, "--listings-file %s: not a JSON array\n", f.listings_file.c_str());
      return 2;
    }
    for (const auto& item : v.get_array()) {
      auto l = sim::market::ListingFromJson(item);
      if (!l.ok()) {
        std::fprintf(stderr, "--listings-file: %s\n", l.error().message.c_str());
        return 2;
      }
      mo.listings.push_back(*l);
    }
  }
  mo.boot_delay = std::chrono::milliseconds(f.boot_ms);
  mo.running_delay = std::chrono::milliseconds(f.running_ms);
  mo.terminate_delay = std::chrono::milliseconds(f.terminate_ms);
  mo.rate_limit_rps = f.rate_limit_rps;
  mo.rate_limit_burst = f.rate_limit_burst;
  mo.churn_interval = std::chrono::milliseconds(f.churn_ms);
  mo.churn_price_fraction = f.churn_price_fraction;
  mo.churn_vanish_rate = f.churn_vanish_rate;
  mo.seed = f.seed;

  BlockStopSignals();

  auto sim = chosen->start(std::move(o));
  if (!sim.ok()) {
    log::Error("simulator could not start",
               {{"provider", chosen->provider}, {"error", sim.error().message}});
    return 1;
  }
  boost::json::object out{{"provider", chosen->provider},
                          {"api", (*sim)->api_endpoint()},
                          {"control", (*sim)->control_endpoint()}};
  std::printf("%s\n", boost::json::serialize(out).c_str());
  std::fflush(stdout);
  int sig = WaitForStopSignal();
  log::Info("simulator stopping", {{"provider", chosen->provider}, {"signal", sig}});
  (*sim)->Stop();
  return 0;
}

}  // namespace hyperslice::cmd
