#!/usr/bin/env bash
# The whole test suite — the README's test command and what .ci/run calls.
#   1. installs Debian packages (scripts/deps.sh), builds the control plane from pinned Go modules
#      (scripts/build-controlplane.sh) and fetches the pinned Compute API definition from npm
#      (scripts/gce-schema.sh), all cached under ~/.cache/hyperslice;
#   2. builds and runs every test (ctest) in a RelWithDebInfo build;
#   3. builds and runs the runtime's tests under ASan+UBSan and under TSan;
#   4. runs the fuzz targets for a bounded time under ASan+UBSan (clang/libFuzzer).
# Prints "N passed, N failed" at the end; exits non-zero when anything failed.
# HS_TEST_QUICK=1 skips 3 and 4 (for a fast local loop).
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo" || exit 1
cache=${HYPERSLICE_CACHE:-$HOME/.cache/hyperslice}
mkdir -p "$cache"
jobs=${HS_JOBS:-$(nproc)}

step() { printf '\n=== %s (%s, %d min in)\n' "$*" "$(date -u +%H:%M:%S)" "$((SECONDS / 60))"; }

# CI gives the whole run 90 minutes on 2 cores. A cold machine (nothing cached: control plane, helm
# and every object compiled from scratch) can need more than that for all stages, so the optional
# stages after the main suite start only while their typical cold cost still fits in the budget;
# a skipped stage is printed and counted as skipped, never as passed. Warm runs (CI reuses
# ~/.cache/hyperslice) take about 40 minutes and run everything.
budget_min=${HS_TIME_BUDGET_MIN:-85}
skipped_stages=()
fits() {  # fits <label> <minutes the stage may take>
  if ((SECONDS / 60 + $2 > budget_min)); then
    echo "SKIPPED $1: ${SECONDS}s elapsed, it may take $2 min, budget ${budget_min} min"
    skipped_stages+=("$1"); return 1
  fi
}

step "dependencies"
bash scripts/deps.sh || exit 1
HYPERSLICE_CONTROLPLANE_BIN=$(bash scripts/build-controlplane.sh) || { echo "control plane build failed"; exit 1; }
export HYPERSLICE_CONTROLPLANE_BIN
if [[ -f scripts/gce-schema.sh ]]; then
  HYPERSLICE_GCE_PROTO_DIR=$(bash scripts/gce-schema.sh) || { echo "compute API definition install failed"; exit 1; }
  export HYPERSLICE_GCE_PROTO_DIR
fi

# The GPU marketplaces' own clients (runpod SDK, vastai CLI) in cached virtualenvs, for the
# provider tests that drive our simulators with them; those tests skip with the reason without it.
if [[ -f scripts/gpu-clients.sh ]]; then
  HYPERSLICE_GPU_CLIENTS=$(bash scripts/gpu-clients.sh) && export HYPERSLICE_GPU_CLIENTS ||
    echo "gpu clients install failed; the official-client tests will skip"
fi

# helm for the chart test (built from its Go module, cached like the control plane); the test
# skips with the reason when it is missing.
if [[ -f scripts/build-helm.sh ]]; then
  HELM=$(bash scripts/build-helm.sh) && export HELM || echo "helm build failed; the chart test will skip"
fi

# Talos's own config loader and validator, the judge of the machine configs the GPU operator
# renders (built from its pinned Go module, cached likewise); the Talos tests skip without it.
if [[ -f scripts/build-talos-checker.sh ]]; then
  HYPERSLICE_TALOS_CHECKER=$(bash scripts/build-talos-checker.sh) && export HYPERSLICE_TALOS_CHECKER ||
    echo "talos checker build failed; the Talos config tests will skip"
fi

# The mesh the GPU join tests run for real: headscale and tailscaled/tailscale, built from their
# pinned Go modules (cached likewise; ≈8.5 min cold on 2 cores). The mesh tests skip without it.
if [[ -f scripts/build-mesh.sh ]]; then
  HYPERSLICE_MESH_BIN=$(bash scripts/build-mesh.sh) && export HYPERSLICE_MESH_BIN ||
    echo "mesh build failed; the headscale/tailscale tests will skip"
fi

# Tailscale's own Go API client (tailscale.com/client/tailscale/v2, pinned) as a check program that
# drives the Tailscale API simulator over OAuth (cached likewise; 16 s cold on 2 cores, warm at
# once). The official-client test skips without it.
if [[ -f scripts/build-tailscale-client-check.sh ]]; then
  HYPERSLICE_TAILSCALE_CLIENT_CHECK=$(bash scripts/build-tailscale-client-check.sh) &&
    export HYPERSLICE_TAILSCALE_CLIENT_CHECK ||
    echo "tailscale client check build failed; the official Tailscale client test will skip"
fi

# ccache keeps object files outside the clone, keyed by content, so a fresh clone rebuilds fast.
launcher=()
if command -v ccache >/dev/null; then
  export CCACHE_DIR="$cache/ccache" CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-8G} CCACHE_BASEDIR="$repo"
  export CCACHE_NOHASHDIR=1
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi

total_pass=0
total_fail=0
failed_suites=()
failed_tests=()  # <build dir>:<ctest name>
# run_ctest <label> <build dir> [ctest args...]: runs and adds the summary to the totals.
run_ctest() {
  local label=$1 dir=$2
  shift 2
  local out
  out=$(mktemp)
  ctest --test-dir "$dir" --output-on-failure --timeout 1200 -j "${HS_CTEST_JOBS:-2}" "$@" 2>&1 | tee "$out"
  local line
  line=$(grep -E 'tests passed, [0-9]+ tests failed out of [0-9]+' "$out" | tail -1)
  if [[ -z $line ]]; then
    if grep -q 'No tests were found' "$out"; then
      echo "$label: no tests found"; failed_suites+=("$label(no tests)"); total_fail=$((total_fail + 1))
    else
      failed_suites+=("$label(ctest did not finish)"); total_fail=$((total_fail + 1))
    fi
  else
    local failed of
    failed=$(sed -E 's/.* ([0-9]+) tests failed out of ([0-9]+).*/\1/' <<<"$line")
    of=$(sed -E 's/.* ([0-9]+) tests failed out of ([0-9]+).*/\2/' <<<"$line")
    total_pass=$((total_pass + of - failed))
    total_fail=$((total_fail + failed))
    ((failed > 0)) && failed_suites+=("$label")
  fi
  # ctest's closing list ("  42 - name (Failed)"): the names, for the excerpts at the end.
  local name
  while IFS= read -r name; do failed_tests+=("$dir:$name"); done < <(
    sed -n '/The following tests FAILED:/,$p' "$out" | sed -nE 's/^[[:space:]]*[0-9]+ - ([^ ]+) .*/\1/p')
  rm -f "$out"
}

build() {  # build <dir> <cmake args...> -- <targets...>
  local dir=$1
  shift
  local args=()
  while [[ $# -gt 0 && $1 != -- ]]; do args+=("$1"); shift; done
  [[ ${1:-} == -- ]] && shift
  cmake -S . -B "$dir" -G Ninja "${launcher[@]}" "${args[@]}" >"$dir.configure.log" 2>&1 ||
    { cat "$dir.configure.log"; return 1; }
  ninja -C "$dir" -j "$jobs" "$@"
}

# Release without debug info: Beast/JSON/gRPC templates make -g the largest part of compile and
# link time on 2 cores; the sanitizer builds below carry line tables for their reports.
step "build (Release)"
if build build -DCMAKE_BUILD_TYPE=Release; then
  step "tests"
  run_ctest main build
else
  failed_suites+=("build"); total_fail=$((total_fail + 1))
fi

if [[ ${HS_TEST_QUICK:-0} != 1 ]]; then
  # The runtime's tests (src/base, src/net, src/kube): test/CMakeLists.txt defines the
  # runtime_tests target and lists their ctest names in runtime_tests.txt.
  # ASan+UBSan also covers the GCE client (against the simulator), the TPU unit tests, the GPU
  # modules and the simulated VMs and GPU machines; TSan the device plugin and the simulated VMs and
  # GPU machines (their kubelet side of the device-plugin API and pod runtime); both the linked
  # runners' kubelet API (unit and integration: SPDY/WebSocket exec and logs through a real
  # apiserver, a thread per request) and ASan/UBSan the control node (unit and integration against
  # an agent double) and the attestation unit tests (the runners_attest integration test drives
  # cosign and swtpm, and runners_agent runs the binary as root with runc: main build only).
  # ignore_noninstrumented_modules: Debian's OpenSSL,
  # gRPC and Abseil are not built with TSan; their own locks are invisible to it, so their internal
  # accesses look racy (ASN1_STRING_cmp in a TLS handshake failed kube_client once); every access in
  # code compiled here is still checked (test/testenv/tsan_options.cc).
  # <sanitizer>:<build dir>:<typical cold minutes>:<test folders>. The runners' part added about
  # 10.5 min of cold compilation to ASan/UBSan (controlnode, kubeletapi, attest, link and their
  # tests; measured on 2 shared cores) and under a minute of tests (warm: ≈30 s under ASan, ≈12 s
  # under TSan).
  for san in "address,undefined:build-asan:35:^(net|kube.*|base|gce|tpu|gpu.*|sim_market|sim_kubelet|sim_gpumachine|runners_kubeletapi|runners_controlnode|unit/runners_attest)\$" \
    "thread:build-tsan:25:^(net|kube.*|base|deviceplugin|sim_kubelet|sim_gpumachine|runners_kubeletapi)\$"; do
    kind=${san%%:*}
    rest=${san#*:}
    dir=${rest%%:*}
    rest=${rest#*:}
    minutes=${rest%%:*}
    dirs=${rest#*:}
    fits "sanitizers ($kind)" "$minutes" || continue
    step "sanitizer build ($kind)"
    if build "$dir" -DCMAKE_BUILD_TYPE=Debug "-DCMAKE_CXX_FLAGS_DEBUG=-O1 -g1" \
      -DHS_SANITIZE="$kind" "-DHS_RUNTIME_TEST_DIRS=$dirs" -- runtime_tests; then
      regex="^($(grep -v '^$' "$dir/runtime_tests.txt" | paste -sd'|'))\$"
      step "runtime tests under $kind"
      ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
        TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 ignore_noninstrumented_modules=1" \
        run_ctest "$kind" "$dir" -R "$regex"
    else
      failed_suites+=("build-$kind"); total_fail=$((total_fail + 1))
    fi
  done

  if [[ -f test/fuzz/CMakeLists.txt ]] && fits "fuzz" 12; then
    step "fuzz (libFuzzer, ASan+UBSan, bounded)"
    if CC=clang CXX=clang++ build build-fuzz -DCMAKE_BUILD_TYPE=Debug "-DCMAKE_CXX_FLAGS_DEBUG=-O1 -g1" -DHS_FUZZ=ON \
         -DHS_SANITIZE=address,undefined -- fuzz_targets; then
      run_ctest fuzz build-fuzz -L fuzz
    else
      failed_suites+=("build-fuzz"); total_fail=$((total_fail + 1))
    fi
  fi
fi

# A CI log is often read from its end only: repeat the last lines each failed test printed (ctest's
# LastTest.log keeps every test's whole output) so the cause is there, not just the count.
if ((${#failed_tests[@]})); then
  echo
  echo "== the failed tests' last 40 lines (whole output above, and in <build dir>/Testing/Temporary/LastTest.log) =="
  for t in "${failed_tests[@]:0:3}"; do
    echo "--- ${t#*:} (${t%%:*})"
    awk -v name="${t#*:}" '$0 ~ ("^[0-9]+/[0-9]+ Testing: " name "$") { on = 1; next }
      on && /^<end of output>$/ { exit } on' "${t%%:*}/Testing/Temporary/LastTest.log" | tail -n 40
  done
fi

echo
((${#failed_suites[@]})) && echo "failed: ${failed_suites[*]}"
((${#failed_tests[@]})) && echo "failed tests: ${failed_tests[*]}"
((${#skipped_stages[@]})) && echo "skipped for the time budget: ${skipped_stages[*]}"
echo "${total_pass} passed, ${total_fail} failed"
((total_fail == 0))
