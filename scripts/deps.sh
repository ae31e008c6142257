#!/usr/bin/env bash
# Installs the Debian packages hyperslice builds and tests with. Idempotent and quick when they are
# already there (one dpkg query, no apt-get call).
set -euo pipefail
pkgs=(
  build-essential cmake ninja-build pkg-config git
  libboost1.81-all-dev libssl-dev libcurl4-openssl-dev libyaml-cpp-dev libfmt-dev libcli11-dev
  libgrpc++-dev libprotobuf-dev libprotoc-dev protobuf-compiler protobuf-compiler-grpc
  libgtest-dev libgmock-dev libbenchmark-dev prometheus-cpp-dev
  clang clang-format clang-tidy libclang-rt-14-dev
  nlohmann-json3-dev zlib1g-dev
  shellcheck openssl ccache golang-go wrk
  runc umoci skopeo docker-registry libarchive-dev iproute2
  containerd containernetworking-plugins
  swtpm swtpm-tools libtss2-dev
)
missing=()
for p in "${pkgs[@]}"; do
  # golang-go: any Go toolchain on PATH will do (the machine image ships a newer one).
  if [[ $p == golang-go ]] && command -v go >/dev/null; then continue; fi
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "deps: installing ${missing[*]}" >&2
  sudo_cmd=()
  [[ $(id -u) -ne 0 ]] && sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi
