#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager, kube-scheduler and etcd from pinned Go modules into
# ${HYPERSLICE_CACHE:-~/.cache/hyperslice}/controlplane-<k8s>-<etcd>/bin. No prebuilt binary is
# downloaded: the Go toolchain fetches module source and compiles it here. Idempotent: a complete
# cache folder is reused as is. Prints the bin folder on stdout.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
# shellcheck source=scripts/versions.env disable=SC1091
. "$here/versions.env"
cache=${HYPERSLICE_CACHE:-$HOME/.cache/hyperslice}
dest="$cache/controlplane-k8s${K8S_VERSION}-etcd${ETCD_VERSION}"
bin="$dest/bin"
if [[ -x $bin/kube-apiserver && -x $bin/kube-controller-manager && -x $bin/kube-scheduler && -x $bin/etcd &&
  -f $dest/.complete ]]; then
  echo "$bin"; exit 0
fi
command -v go >/dev/null || { echo "build-controlplane: go is required" >&2; exit 1; }
mkdir -p "$bin" "$dest/src/k8s" "$dest/src/etcd"
log() { echo "build-controlplane: $*" >&2; }

# Kubernetes: k8s.io/kubernetes requires its staging modules at v0.0.0 and replaces them with
# ./staging in its own go.mod, which Go ignores for dependencies. A wrapper module re-pins each
# staging module to the matching published v0.X.Y.
minor=${K8S_VERSION#1.}
stagever="v0.${minor}"
cd "$dest/src/k8s"
if [[ ! -f go.sum ]]; then
  log "resolving k8s.io/kubernetes v${K8S_VERSION}"
  cat > go.mod <<MOD
module hyperslice.dev/controlplane
go 1.26
MOD
  modfile=$(go mod download -json "k8s.io/kubernetes@v${K8S_VERSION}" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  {
    echo "require k8s.io/kubernetes v${K8S_VERSION}"
    grep -E '^\s+k8s\.io/[a-z0-9-]+ v0\.0\.0$' "$modfile" | awk -v v="$stagever" '{print "replace " $1 " => " $1 " " v}'
  } >> go.mod
  cat > tools.go <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
)
GO
  go mod tidy >&2
fi
export CGO_ENABLED=0
# kube-scheduler is in the same k8s.io/kubernetes module (added after the first caches were made:
# -mod=mod lets an older go.sum gain what the scheduler needs).
for cmd in kube-apiserver kube-controller-manager kube-scheduler; do
  if [[ ! -x $bin/$cmd ]]; then
    log "building $cmd (this takes several minutes on 2 cores)"
    go build -mod=mod -trimpath -ldflags='-s -w' -o "$bin/$cmd.tmp" "k8s.io/kubernetes/cmd/$cmd" && mv "$bin/$cmd.tmp" "$bin/$cmd"
  fi
done

cd "$dest/src/etcd"
if [[ ! -x $bin/etcd ]]; then
  log "building etcd v${ETCD_VERSION}"
  if [[ ! -f go.sum ]]; then
    cat > go.mod <<MOD
module hyperslice.dev/etcdbuild
go 1.26
require go.etcd.io/etcd/server/v3 v${ETCD_VERSION}
MOD
    cat > tools.go <<'GO'
//go:build tools

package tools

import _ "go.etcd.io/etcd/server/v3/etcdmain"
GO
    cat > main.go <<'GO'
// Command etcd is etcd's own main, built from the pinned go.etcd.io/etcd/server/v3 module.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
    go mod tidy >&2
  fi
  go build -trimpath -ldflags='-s -w' -o "$bin/etcd.tmp" . && mv "$bin/etcd.tmp" "$bin/etcd"
fi
touch "$dest/.complete"
echo "$bin"
