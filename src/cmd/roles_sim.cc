// `hyperslice sim gce`: the Compute Engine simulator (sim/gce) as a process, for tests, the local
// demo and the real gcloud CLI. Prints its endpoints as one JSON line on stdout, then serves until
// SIGTERM/SIGINT.
//
// This file includes sim/: the `sim` and `dev` roles of the composition root are the one place in
// src/ that knows the simulators (docs/architecture.md, "Rules that keep this order true").
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <boost/json.hpp>

#include "sim/gce/simulator.h"
#include "src/base/files.h"
#include "src/base/log.h"
#include "src/base/strings.h"
#include "src/cmd/roles.h"

namespace hyperslice::cmd {
namespace {

struct SimFlags {
  CLI::App* gce = nullptr;
  std::vector<std::string> projects;
  std::vector<std::string> regions;
  std::vector<std::string> capacity;      // "<zone>/<machineType>=<n>"
  std::vector<std::string> reservations;  // "[<project>/]<zone>/<name>/<machineType>=<n>"
  std::vector<std::string> static_tokens;
  std::string static_token_file;
  int operation_latency_ms = 200;
  int boot_latency_ms = 200;
  int mig_retry_ms = 500;
  int wait_max_ms = 120000;
  std::string address = "127.0.0.1";
  uint16_t api_port = 0, metadata_port = 0, control_port = 0;
  int api_threads = 2;
  std::string proto_dir;
  bool no_validate = false;
  bool no_auth = false;
  uint64_t seed = 1;
};

SimFlags& Flags() {
  static SimFlags flags;
  return flags;
}

// "<lhs>=<n>" -> lhs, n.
bool SplitCount(const std::string& s, std::string* lhs, int64_t* n) {
  auto eq = s.rfind('=');
  if (eq == std::string::npos) return false;
  *lhs = s.substr(0, eq);
  try {
    size_t pos = 0;
    *n = std::stoll(s.substr(eq + 1), &pos);
    return pos == s.size() - eq - 1 && *n >= 0;
  } catch (...) {
    return false;
  }
}

std::vector<std::string> SplitSlash(const std::string& s) {
  std::vector<std::string> out;
  size_t i = 0;
  while (true) {
    size_t j = s.find('/', i);
    out.push_back(s.substr(i, j == std::string::npos ? std::string::npos : j - i));
    if (j == std::string::npos) break;
    i = j + 1;
  }
  return out;
}

}  // namespace

// The GPU marketplace simulators (roles_sim_market.cc).
void SetupMarketSims(CLI::App& sim);
int RunMarketSim();

void SetupSim(CLI::App& app) {
  SimFlags& f = Flags();
  app.require_subcommand(1);
  CLI::App* gce = app.add_subcommand("gce", "Compute Engine v1 simulator (API, metadata, control)");
  f.gce = gce;
  gce->add_option("--project", f.projects, "project served (repeatable; default my-gcp-project)");
  gce->add_option("--region", f.regions,
                  "region served, zones <region>-{a,b,c,f} (repeatable; "
                  "default us-central1)");
  gce->add_option("--capacity", f.capacity,
                  "VMs of a machine type a zone can run outside reservations, "
                  "<zone>/<machineType>=<n> (repeatable; unlisted pairs are unlimited)");
  gce->add_option("--reservation", f.reservations,
                  "a specific reservation, [<project>/]<zone>/<name>/<machineType>=<count> "
                  "(repeatable)");
  gce->add_option("--static-token", f.static_tokens,
                  "an access token the API accepts besides issued ones (repeatable)");
  gce->add_option("--static-token-file", f.static_token_file,
                  "file whose content (trimmed) is accepted as an access token, e.g. the file "
                  "given to gcloud's --access-token-file");
  gce->add_option("--operation-latency-ms", f.operation_latency_ms,
                  "time an operation takes from PENDING to DONE")
      ->capture_default_str();
  gce->add_option("--boot-latency-ms", f.boot_latency_ms,
                  "time a VM takes from PROVISIONING to RUNNING")
      ->capture_default_str();
  gce->add_option("--mig-retry-ms", f.mig_retry_ms,
                  "how often a group short of capacity tries again")
      ->capture_default_str();
  gce->add_option("--operation-wait-max-ms", f.wait_max_ms,
                  "longest operations/{op}/wait long-poll (GCE: 2 minutes)")
      ->capture_default_str();
  gce->add_option("--address", f.address, "listen address (loopback)")->capture_default_str();
  gce->add_option("--api-port", f.api_port, "API port (0: any free port)")->capture_default_str();
  gce->add_option("--metadata-port", f.metadata_port, "metadata server port (0: any free port)")
      ->capture_default_str();
  gce->add_option("--control-port", f.control_port, "control endpoint port (0: any free port)")
      ->capture_default_str();
  gce->add_option("--api-threads", f.api_threads, "API server threads")->capture_default_str();
  gce->add_option("--proto-dir", f.proto_dir,
                  "folder with google/cloud/compute/v1/compute.proto (output of "
                  "scripts/gce-schema.sh; default $HYPERSLICE_GCE_PROTO_DIR or its cache)")
      ->envname("HYPERSLICE_GCE_PROTO_DIR");
  gce->add_flag("--no-validate", f.no_validate, "do not validate request bodies against the API");
  gce->add_flag("--no-auth", f.no_auth, "accept API calls without an access token");
  gce->add_option("--seed", f.seed, "seed of fault injection and generated names")
      ->capture_default_str();
  SetupMarketSims(app);
}

int RunSim(CLI::App&) {
  SimFlags& f = Flags();
  if (int rc = RunMarketSim(); rc >= 0) return rc;
  if (f.gce == nullptr || !f.gce->parsed()) {
    std::fprintf(stderr,
                 "hyperslice sim: choose a simulator (gce, runpod, lambda, paperspace, vast)\n");
    return 2;
  }
  sim::gce::Options o;
  if (!f.projects.empty()) o.projects = f.projects;
  if (!f.regions.empty()) o.regions = f.regions;
  for (const auto& c : f.capacity) {
    std::string lhs;
    int64_t n = 0;
    std::vector<std::string> parts;
    if (!SplitCount(c, &lhs, &n) || (parts = SplitSlash(lhs)).size() != 2) {
      std::fprintf(stderr, "bad --capacity '%s' (want <zone>/<machineType>=<n>)\n", c.c_str());
      return 2;
    }
    o.capacity.push_back({parts[0], parts[1], n});
  }
  for (const auto& r : f.reservations) {
    std::string lhs;
    int64_t n = 0;
    if (!SplitCount(r, &lhs, &n)) {
      std::fprintf(stderr, "bad --reservation '%s'\n", r.c_str());
      return 2;
    }
    auto parts = SplitSlash(lhs);
    sim::gce::Reservation res;
    if (parts.size() == 4) {
      res = {parts[0], parts[1], parts[2], parts[3], n};
    } else if (parts.size() == 3) {
      res = {"", parts[0], parts[1], parts[2], n};
    } else {
      std::fprintf(stderr, "bad --reservation '%s' (want [<project>/]<zone>/<name>/<mt>=<n>)\n",
                   r.c_str());
      return 2;
    }
    o.reservations.push_back(res);
  }
  o.static_tokens = f.static_tokens;
  if (!f.static_token_file.empty()) {
    auto file = ReadFile(f.static_token_file);
    std::string token = file.ok() ? TrimSpace(*file) : "";
    if (token.empty()) {
      std::fprintf(stderr, "cannot read --static-token-file %s\n", f.static_token_file.c_str());
      return 2;
    }
    o.static_tokens.push_back(token);
  }
  o.operation_latency = std::chrono::milliseconds(f.operation_latency_ms);
  o.instance_boot_latency = std::chrono::milliseconds(f.boot_latency_ms);
  o.mig_retry_interval = std::chrono::milliseconds(f.mig_retry_ms);
  o.operation_wait_max = std::chrono::milliseconds(f.wait_max_ms);
  o.address = f.address;
  o.api_port = f.api_port;
  o.metadata_port = f.metadata_port;
  o.control_port = f.control_port;
  o.api_threads = f.api_threads;
  o.proto_dir = f.proto_dir;
  o.validate_requests = !f.no_validate;
  o.require_auth = !f.no_auth;
  o.seed = f.seed;

  BlockStopSignals();

  auto sim = sim::gce::Simulator::Start(o);
  if (!sim.ok()) {
    log::Error("gce simulator could not start", {{"error", sim.error().message}});
    return 1;
  }
  boost::json::object out{
      {"api", (*sim)->api_endpoint()},
      {"token", (*sim)->token_endpoint()},
      {"metadata", (*sim)->metadata_endpoint()},
      {"control", (*sim)->control_endpoint()},
      {"metadataHostTemplate", (*sim)->metadata_host("{project}", "{zone}", "{instance}")},
  };
  std::printf("%s\n", boost::json::serialize(out).c_str());
  std::fflush(stdout);
  int sig = WaitForStopSignal();
  log::Info("gce simulator stopping", {{"signal", sig}});
  (*sim)->Stop();
  return 0;
}

}  // namespace hyperslice::cmd
