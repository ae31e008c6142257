#!/usr/bin/env bash
# The README's main command: builds what is missing and runs `hyperslice dev` (the local default).
# Extra arguments go to `hyperslice dev`.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
cache=${HYPERSLICE_CACHE:-$HOME/.cache/hyperslice}
bash scripts/deps.sh
HYPERSLICE_CONTROLPLANE_BIN=$(bash scripts/build-controlplane.sh)
export HYPERSLICE_CONTROLPLANE_BIN
# The GPU story's tailnet (headscale, tailscaled): built once from pinned Go modules (about 8.5 min
# cold), then cached; without it (or without root) the story runs with the tailnet off.
if [[ " $* " == *" gpu "* || " $* " == *"--example=gpu"* ]] && [[ -f scripts/build-mesh.sh ]]; then
  HYPERSLICE_MESH_BIN=$(bash scripts/build-mesh.sh) && export HYPERSLICE_MESH_BIN ||
    echo "dev.sh: the mesh did not build; the GPU story runs with the tailnet off" >&2
fi
if [[ -f scripts/gce-schema.sh ]]; then
  HYPERSLICE_GCE_PROTO_DIR=$(bash scripts/gce-schema.sh)
  export HYPERSLICE_GCE_PROTO_DIR
fi
launcher=()
if command -v ccache >/dev/null; then
  export CCACHE_DIR="$cache/ccache" CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-8G} CCACHE_BASEDIR="$repo"
  export CCACHE_NOHASHDIR=1
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
# The same build folder, type and ccache settings as scripts/test.sh, so running this first and
# the tests second compiles each object once.
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" >/dev/null
ninja -C build hyperslice
exec build/hyperslice dev "$@"
