#!/usr/bin/env bash
# Builds the Talos config checker (scripts/talos-checker: Talos's own config loader and validator,
# github.com/siderolabs/talos/pkg/machinery, at the version pinned in its go.mod) into
# ${HYPERSLICE_CACHE:-~/.cache/hyperslice}/talos-checker-v<version>/bin/talos-checker. Tests use it
# as the judge of the machine configs the operator renders; the operator never runs it. No prebuilt
# binary is downloaded: the Go toolchain fetches module source (checked against go.sum) and
# compiles it here (about 80 s cold on 2 cores). Idempotent: a complete cache folder built from
# the same source is reused as is. Prints the checker's path on stdout.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src="$here/talos-checker"
# The version is the one go.mod requires (the module proxy will not list versions, so it is pinned
# exactly there and nowhere else).
version=$(awk '$1 == "require" && $2 == "github.com/siderolabs/talos/pkg/machinery" { print $3 }' "$src/go.mod")
[[ -n $version ]] || { echo "build-talos-checker: no machinery version in $src/go.mod" >&2; exit 1; }
cache=${HYPERSLICE_CACHE:-$HOME/.cache/hyperslice}
dest="$cache/talos-checker-${version}"
# .complete records the checker's source, so an edited main.go rebuilds (in seconds: Go's own
# build cache keeps the machinery packages).
stamp=$(cat "$src/go.mod" "$src/go.sum" "$src/main.go" | sha256sum | cut -d' ' -f1)
if [[ -x $dest/bin/talos-checker && -f $dest/.complete && $(cat "$dest/.complete") == "$stamp" ]]; then
  echo "$dest/bin/talos-checker"; exit 0
fi
command -v go >/dev/null || { echo "build-talos-checker: go is required" >&2; exit 1; }
mkdir -p "$dest/bin"
echo "build-talos-checker: building the Talos checker (machinery ${version}) from source" >&2
(cd "$src" && CGO_ENABLED=0 go build -mod=readonly -trimpath -ldflags='-s -w' \
  -o "$dest/bin/talos-checker" .) >&2
# Smoke test: an empty config must be refused (exit 1), proving the loader runs.
rc=0; printf 'version: v1alpha1\n' | "$dest/bin/talos-checker" >/dev/null || rc=$?
[[ $rc -eq 1 ]] || { echo "build-talos-checker: smoke test exited $rc, want 1" >&2; exit 1; }
echo "$stamp" >"$dest/.complete"
echo "$dest/bin/talos-checker"
