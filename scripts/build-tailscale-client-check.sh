#!/usr/bin/env bash
# Builds the Tailscale API v2 client check (scripts/tailscale-client-check: Tailscale's own Go API
# client, tailscale.com/client/tailscale/v2 at the version pinned in its go.mod, driving a server
# over OAuth client credentials) into
# ${HYPERSLICE_CACHE:-~/.cache/hyperslice}/tailscale-client-check-v<version>/bin/tailscale-client-check.
# Tests run it against sim/tailscale; the operator never runs it. No prebuilt binary is downloaded:
# the Go toolchain fetches module source (checked against go.sum) and compiles it here (measured
# cold, empty Go module and build caches, 2 cores at load ≈2: 16 s with downloads). Idempotent: a
# complete cache folder built from the same source is reused as is. Prints the binary's path.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src="$here/tailscale-client-check"
# The version is the one go.mod requires, pinned exactly there and nowhere else.
version=$(awk '$1 == "require" && $2 == "tailscale.com/client/tailscale/v2" { print $3 }' "$src/go.mod")
[[ -n $version ]] || { echo "build-tailscale-client-check: no client version in $src/go.mod" >&2; exit 1; }
cache=${HYPERSLICE_CACHE:-$HOME/.cache/hyperslice}
dest="$cache/tailscale-client-check-${version}"
bin="$dest/bin/tailscale-client-check"
# .complete records the source and the build flags, so an edited main.go rebuilds (in seconds: Go's
# own build cache keeps the client's packages).
flags=(-mod=readonly -trimpath -ldflags='-s -w')
stamp=$({ cat "$src/go.mod" "$src/go.sum" "$src/main.go"; echo "${flags[*]}"; } | sha256sum | cut -d' ' -f1)
complete() { [[ -x $bin && -f $dest/.complete && $(cat "$dest/.complete") == "$stamp" ]]; }
if complete; then echo "$bin"; exit 0; fi
command -v go >/dev/null || { echo "build-tailscale-client-check: go is required" >&2; exit 1; }
mkdir -p "$dest/bin"
# Two worktrees running test.sh at once must not build into the same folder together.
exec 9>"$dest.lock"
flock 9
if complete; then echo "$bin"; exit 0; fi
rm -f "$dest/.complete"
start=$SECONDS
echo "build-tailscale-client-check: building the check (client ${version}) from source" >&2
(cd "$src" && CGO_ENABLED=0 go build "${flags[@]}" -o "$bin" .) >&2
echo "build-tailscale-client-check: built in $((SECONDS - start)) s" >&2
# Smoke test: without flags it must print its usage and exit 2, proving the binary runs.
rc=0; "$bin" >/dev/null 2>&1 || rc=$?
[[ $rc -eq 2 ]] || { echo "build-tailscale-client-check: smoke test exited $rc, want 2" >&2; exit 1; }
echo "$stamp" >"$dest/.complete"
echo "$bin"
