#!/usr/bin/env bash
# Installs the GPU marketplaces' official clients (the `runpod` SDK and the `vastai` CLI, pinned in
# versions.env) into two virtualenvs (their pinned dependencies conflict) under
# ${HYPERSLICE_CACHE:-~/.cache/hyperslice}/gpu-clients-<versions>/{runpod,vastai}, reused as is once
# complete. Prints that folder on stdout: <dir>/runpod/bin/python, <dir>/vastai/bin/vastai. The
# tests point these clients at the simulators (RUNPOD_API_BASE_URL, vastai --url).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
# shellcheck source=scripts/versions.env disable=SC1091
. "$here/versions.env"
cache=${HYPERSLICE_CACHE:-$HOME/.cache/hyperslice}
dest="$cache/gpu-clients-runpod${RUNPOD_PY_VERSION}-vastai${VASTAI_PY_VERSION}"
mkdir -p "$cache"
# Two runs at once (parallel test jobs) must not install into the same folder: the second waits.
exec 9>"$dest.lock"
flock 9
if [[ -f $dest/.complete ]]; then
  echo "$dest"; exit 0
fi
command -v python3 >/dev/null || { echo "gpu-clients: python3 is required" >&2; exit 1; }
rm -rf "$dest"
for pkg in "runpod==${RUNPOD_PY_VERSION}" "vastai==${VASTAI_PY_VERSION}"; do
  venv="$dest/${pkg%%=*}"
  python3 -m venv "$venv" >&2
  "$venv/bin/pip" install -q --disable-pip-version-check "$pkg" >&2
done
touch "$dest/.complete"
echo "$dest"
