#!/usr/bin/env bash
# Installs the Compute Engine v1 API definition the GCE simulator validates requests against: the npm
# package @google-cloud/compute at a pinned version, into
#   ${HYPERSLICE_CACHE:-~/.cache/hyperslice}/npm/compute-<version>
# and prints the folder holding google/cloud/compute/v1/compute.proto (its build/protos folder).
# Idempotent: a completed install (marked by .complete) is reused without calling npm.
set -euo pipefail
COMPUTE_NPM_VERSION=7.8.0
cache=${HYPERSLICE_CACHE:-$HOME/.cache/hyperslice}
dest=$cache/npm/compute-$COMPUTE_NPM_VERSION
protos=$dest/node_modules/@google-cloud/compute/build/protos
if [[ ! -f $dest/.complete ]]; then
  command -v npm >/dev/null || { echo "gce-schema: npm is not installed" >&2; exit 1; }
  mkdir -p "$dest"
  # --ignore-scripts: only the .proto files are wanted; nothing of the package is run.
  npm install --prefix "$dest" --no-audit --no-fund --ignore-scripts --omit=dev \
    "@google-cloud/compute@$COMPUTE_NPM_VERSION" >&2
  [[ -f $protos/google/cloud/compute/v1/compute.proto ]] || {
    echo "gce-schema: compute.proto missing from $protos" >&2
    exit 1
  }
  touch "$dest/.complete"
fi
echo "$protos"
