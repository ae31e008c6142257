// What a user migrating from gke-tpu-env-injector (seed 001) keeps: the two sample workloads its
// integration test applies and the MutatingWebhookConfiguration its chart ships, as the files in
// test/corpus/gke-tpu-env-injector (read at run time; each file says what it is). Shared by the
// unit and integration tests, whose targets define HS_UPSTREAM_SAMPLES_DIR as that folder.
#pragma once

#include <string>

#include "test/testenv/files.h"

namespace hyperslice::webhook::upstream {

// Upstream's integration test reads web-0's container 0 by position:
//   no extra env:   env[0] is TPU_WORKER_HOSTNAMES = "web-0.nginx,web-1.nginx,web-2.nginx"
//   with FOO=BAR:   env[0] is FOO, env[1] is TPU_WORKER_HOSTNAMES with the same value
inline constexpr char kHostnames[] = "web-0.nginx,web-1.nginx,web-2.nginx";

// samples/no_extra_env_vars.yaml or samples/with_extra_env_vars.yaml ("" when unreadable: the
// test's parse of it then fails).
inline std::string Sample(bool with_extra_env) {
  return testenv::ReadFile(
      std::string(HS_UPSTREAM_SAMPLES_DIR) +
      (with_extra_env ? "/with_extra_env_vars.yaml" : "/no_extra_env_vars.yaml"));
}

// The chart's configuration (chart/templates/mutatingwebhook.yaml).
inline std::string WebhookConfiguration() {
  return testenv::ReadFile(HS_UPSTREAM_SAMPLES_DIR "/mutatingwebhook.yaml");
}

}  // namespace hyperslice::webhook::upstream
