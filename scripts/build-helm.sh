#!/usr/bin/env bash
# Builds the helm CLI from its pinned Go module (helm.sh/helm/v3) into
# ${HYPERSLICE_CACHE:-~/.cache/hyperslice}/helm-<version>/bin/helm. No prebuilt binary is
# downloaded: the Go toolchain fetches module source and compiles it here (a few minutes on 2
# cores). Idempotent: a complete cache folder is reused as is. Prints the helm path on stdout.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=scripts/versions.env disable=SC1091
. "$here/versions.env"
cache=${HYPERSLICE_CACHE:-$HOME/.cache/hyperslice}
dest="$cache/helm-${HELM_VERSION}"
if [[ -x $dest/bin/helm && -f $dest/.complete ]]; then
  echo "$dest/bin/helm"; exit 0
fi
command -v go >/dev/null || { echo "build-helm: go is required" >&2; exit 1; }
mkdir -p "$dest/bin"
echo "build-helm: building helm v${HELM_VERSION} from source" >&2
CGO_ENABLED=0 GOBIN="$dest/bin" go install -trimpath -ldflags='-s -w' \
  "helm.sh/helm/v3/cmd/helm@v${HELM_VERSION}" >&2
"$dest/bin/helm" version --short >&2
touch "$dest/.complete"
echo "$dest/bin/helm"
