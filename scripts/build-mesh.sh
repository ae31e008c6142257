#!/usr/bin/env bash
# Builds the mesh the GPU join tests run — headscale (the coordination server) and tailscaled +
# the tailscale CLI — from the wrapper modules in scripts/mesh/ (headscale/ and tailscale/, exact
# versions pinned in their go.mod/go.sum and in versions.env) into
# ${HYPERSLICE_CACHE:-~/.cache/hyperslice}/mesh-headscale<v>-tailscale<v>/bin. The operator never
# runs these; tests do. No prebuilt binary is downloaded: the Go toolchain fetches module source
# (checked against go.sum) and compiles it here (measured cold, nothing in Go's caches, on 2
# busy cores: headscale 3.5 min, tailscaled + tailscale 5 min, downloads included). Idempotent: a
# complete cache folder built from the same source is reused as is. Prints the bin folder.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=scripts/versions.env disable=SC1091
. "$here/versions.env"
src="$here/mesh"
# versions.env is what people read; go.mod is what builds. Refuse to build when they disagree
# rather than cache a folder whose name lies about its contents.
req() { awk -v m="$2" '($1 == "require" && $2 == m) || ($1 == m) { print $2 == m ? $3 : $2; exit }' "$1"; }
hs=$(req "$src/headscale/go.mod" github.com/juanfont/headscale)
ts=$(req "$src/tailscale/go.mod" tailscale.com)
[[ $hs == "v$HEADSCALE_VERSION" && $ts == "v$TAILSCALE_VERSION" ]] || {
  echo "build-mesh: go.mod pins headscale $hs, tailscale $ts; versions.env says" \
    "v$HEADSCALE_VERSION, v$TAILSCALE_VERSION" >&2
  exit 1
}
cache=${HYPERSLICE_CACHE:-$HOME/.cache/hyperslice}
dest="$cache/mesh-headscale${HEADSCALE_VERSION}-tailscale${TAILSCALE_VERSION}"
# A module-path build has no VCS stamp, so tailscale would call itself "1.102.5-ERR-BuildInfo";
# these are the stamps tailscale's own build_dist.sh sets.
ts_ldflags="-X tailscale.com/version.longStamp=$TAILSCALE_VERSION"
ts_ldflags+=" -X tailscale.com/version.shortStamp=$TAILSCALE_VERSION"
# .complete records the source and the build flags, so a change to either rebuilds (in seconds for
# a flag while Go's own build cache keeps the packages); an edited comment here does not.
stamp=$({ cat "$src"/headscale/{go.mod,go.sum,tools.go} "$src"/tailscale/{go.mod,go.sum,tools.go}
  echo "$ts_ldflags"; } | sha256sum | cut -d' ' -f1)
complete() { [[ -x $dest/bin/headscale && -x $dest/bin/tailscaled && -x $dest/bin/tailscale &&
  -f $dest/.complete && $(cat "$dest/.complete") == "$stamp" ]]; }
if complete; then echo "$dest/bin"; exit 0; fi
command -v go >/dev/null || { echo "build-mesh: go is required" >&2; exit 1; }
mkdir -p "$dest/bin"
# Two worktrees running test.sh at once must not both spend 12 minutes building the same folder.
exec 9>"$dest.lock"
flock 9
if complete; then echo "$dest/bin"; exit 0; fi
rm -f "$dest/.complete"
# build <module dir> <extra ldflags> <import path>...: builds each command into $dest/bin, timed.
build() {
  local dir=$1 ldflags="-s -w $2" start=$SECONDS
  shift 2
  (cd "$dir" && CGO_ENABLED=0 go build -mod=readonly -trimpath -ldflags="$ldflags" -o "$dest/bin/" "$@") >&2
  echo "build-mesh: built $* in $((SECONDS - start)) s" >&2
}
echo "build-mesh: building headscale v${HEADSCALE_VERSION} from source" >&2
build "$src/headscale" "" github.com/juanfont/headscale/cmd/headscale
echo "build-mesh: building tailscaled and tailscale v${TAILSCALE_VERSION} from source" >&2
build "$src/tailscale" "$ts_ldflags" tailscale.com/cmd/tailscaled tailscale.com/cmd/tailscale
# Smoke test: each binary starts and reports the pinned version.
hv=$("$dest/bin/headscale" version)
[[ $hv == *"v$HEADSCALE_VERSION"* ]] || { echo "build-mesh: headscale version says '$hv'" >&2; exit 1; }
"$dest/bin/tailscaled" --version >&2
v=$("$dest/bin/tailscale" version)
[[ ${v%%$'\n'*} == "$TAILSCALE_VERSION" ]] || { echo "build-mesh: tailscale version says '$v'" >&2; exit 1; }
echo "$stamp" >"$dest/.complete"
echo "$dest/bin"
