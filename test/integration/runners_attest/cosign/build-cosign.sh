#!/usr/bin/env bash
# Builds the cosign CLI the attestation integration test signs with, from the wrapper module next
# to this script (exact version pinned in go.mod/go.sum), into
# ${HYPERSLICE_CACHE:-~/.cache/hyperslice}/cosign-<version>/bin. No prebuilt binary is downloaded:
# the Go toolchain fetches module source (checked against go.sum) and compiles it here. Measured
# cold on 2 cores shared with other builds (load ≈12): see src/runners/attest/README.md.
# Idempotent: a complete cache folder built from the same source is reused. Prints the bin folder.
set -euo pipefail
src=$(cd "$(dirname "$0")" && pwd)
version=$(awk '$1 == "require" && $2 == "github.com/sigstore/cosign/v2" { print $3; exit }' "$src/go.mod")
[[ $version == v* ]] || { echo "build-cosign: no cosign version in $src/go.mod" >&2; exit 1; }
cache=${HYPERSLICE_CACHE:-$HOME/.cache/hyperslice}
dest="$cache/cosign-${version#v}"
# A module-path build has no VCS stamp; this is the variable cosign's own Makefile sets.
ldflags="-s -w -X sigs.k8s.io/release-utils/version.gitVersion=$version"
stamp=$({ cat "$src"/{go.mod,go.sum,tools.go}; echo "$ldflags"; } | sha256sum | cut -d' ' -f1)
complete() { [[ -x $dest/bin/cosign && -f $dest/.complete && $(cat "$dest/.complete") == "$stamp" ]]; }
if complete; then echo "$dest/bin"; exit 0; fi
command -v go >/dev/null || { echo "build-cosign: go is required" >&2; exit 1; }
mkdir -p "$dest/bin"
exec 9>"$dest.lock"
flock 9
if complete; then echo "$dest/bin"; exit 0; fi
rm -f "$dest/.complete"
start=$SECONDS
echo "build-cosign: building cosign $version from source" >&2
(cd "$src" && CGO_ENABLED=0 go build -mod=readonly -trimpath -ldflags="$ldflags" -o "$dest/bin/" \
  github.com/sigstore/cosign/v2/cmd/cosign) >&2
echo "build-cosign: built cosign in $((SECONDS - start)) s" >&2
v=$("$dest/bin/cosign" version 2>&1 | awk '/GitVersion/ { print $2 }')
[[ $v == "$version" ]] || { echo "build-cosign: cosign version says '$v'" >&2; exit 1; }
echo "$stamp" >"$dest/.complete"
echo "$dest/bin"
