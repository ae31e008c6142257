#!/usr/bin/env bash
# hyperslice TPU node bootstrap: the `startup-script` the TPU operator puts on each VM of a
# TPUNodeGroup (bootstrapKubernetes set). Pull model (ARCHITECTURE.md §5):
#   1. install containerd, kubeadm and kubelet for the group's Kubernetes minor version;
#   2. poll this VM's metadata for kubeadm-join-token, kubeadm-ca-hash and
#      kubeadm-control-plane-ip, which the operator writes once the VM is RUNNING;
#   3. write a kubeadm JoinConfiguration (provider-id gce://<project>/<zone>/<instance>, the
#      kube-labels metadata as node labels) and `kubeadm join`, with retries.
# The join token is never printed; the configuration holding it lives on tmpfs (/run) and is
# removed after the join.
#
# Tests source this file (main runs only when it is executed) and call the functions alone;
# every path and bound below can be overridden from the environment. GCE_METADATA_HOST names the
# metadata server as Google's client libraries do (the GCE simulator gives each VM its own).
set -euo pipefail

# Replaced by the operator with spec.bootstrapKubernetes.version ("1.31" or "1.31.2").
HS_KUBERNETES_VERSION="${HS_KUBERNETES_VERSION:-@KUBERNETES_VERSION@}"
HS_WORK_DIR="${HS_WORK_DIR:-/run/hyperslice}"
HS_JOIN_CONFIG="${HS_JOIN_CONFIG:-${HS_WORK_DIR}/kubeadm-join.yaml}"
HS_KUBELET_KUBECONFIG="${HS_KUBELET_KUBECONFIG:-/etc/kubernetes/kubelet.conf}"
# Polling the metadata: at most HS_POLL_ATTEMPTS reads, the wait doubling from the initial delay
# up to the maximum (defaults: about 2 hours, beyond the operator's 1 h token lifetime).
HS_POLL_ATTEMPTS="${HS_POLL_ATTEMPTS:-720}"
HS_POLL_INITIAL_DELAY_MS="${HS_POLL_INITIAL_DELAY_MS:-1000}"
HS_POLL_MAX_DELAY_MS="${HS_POLL_MAX_DELAY_MS:-10000}"
HS_JOIN_ATTEMPTS="${HS_JOIN_ATTEMPTS:-5}"
HS_JOIN_RETRY_DELAY_MS="${HS_JOIN_RETRY_DELAY_MS:-15000}"
HS_DEFAULT_API_PORT=6443

# Filled by the functions below.
HS_PROJECT=""
HS_ZONE=""
HS_INSTANCE=""
HS_KUBE_LABELS=""
HS_JOIN_TOKEN=""
HS_CA_HASH=""
HS_CONTROL_PLANE=""

hs_log() {
  printf '%s hyperslice-bootstrap: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$*" >&2
}

hs_sleep_ms() {
  local ms="$1"
  sleep "$((ms / 1000)).$(printf '%03d' "$((ms % 1000))")"
}

# Prints the metadata value at <path> (relative to computeMetadata/v1/); fails when absent.
hs_metadata_get() {
  curl -sSf --connect-timeout 5 --max-time 10 -H 'Metadata-Flavor: Google' \
    "http://${GCE_METADATA_HOST:-metadata.google.internal}/computeMetadata/v1/$1" 2>/dev/null
}

# hs_metadata_wait <path> <variable>: reads <path> into <variable> with bounded retries.
hs_metadata_wait() {
  local path="$1" var="$2" attempt=1 delay_ms="$HS_POLL_INITIAL_DELAY_MS" value
  while ! value="$(hs_metadata_get "$path")"; do
    if ((attempt >= HS_POLL_ATTEMPTS)); then
      hs_log "metadata ${path} not readable after ${attempt} attempts"
      return 1
    fi
    hs_sleep_ms "$delay_ms"
    delay_ms=$((delay_ms * 2))
    if ((delay_ms > HS_POLL_MAX_DELAY_MS)); then delay_ms="$HS_POLL_MAX_DELAY_MS"; fi
    attempt=$((attempt + 1))
  done
  printf -v "$var" '%s' "$value"
}

# This VM's identity: HS_PROJECT, HS_ZONE, HS_INSTANCE, and HS_KUBE_LABELS (may be empty).
hs_fetch_identity() {
  local zone_path
  hs_metadata_wait project/project-id HS_PROJECT
  hs_metadata_wait instance/zone zone_path # projects/<number>/zones/<zone>
  HS_ZONE="${zone_path##*/}"
  hs_metadata_wait instance/name HS_INSTANCE
  HS_KUBE_LABELS="$(hs_metadata_get instance/attributes/kube-labels || true)"
  if [[ ! "$HS_KUBE_LABELS" =~ ^[A-Za-z0-9._/=,-]*$ ]]; then
    hs_log "ignoring malformed kube-labels metadata"
    HS_KUBE_LABELS=""
  fi
  if [[ -z "$HS_PROJECT" || -z "$HS_ZONE" || -z "$HS_INSTANCE" ]]; then
    hs_log "incomplete instance identity in the metadata"
    return 1
  fi
}

# Polls the metadata until the operator has written the three join values (well-formed), then
# sets HS_JOIN_TOKEN, HS_CA_HASH and HS_CONTROL_PLANE. Bounded by HS_POLL_ATTEMPTS.
hs_poll_join_values() {
  local attempt=1 delay_ms="$HS_POLL_INITIAL_DELAY_MS" token="" ca="" cp="" why
  while :; do
    why=""
    if ! token="$(hs_metadata_get instance/attributes/kubeadm-join-token)" ||
      ! ca="$(hs_metadata_get instance/attributes/kubeadm-ca-hash)" ||
      ! cp="$(hs_metadata_get instance/attributes/kubeadm-control-plane-ip)"; then
      why="not in the metadata yet"
    elif [[ ! "$token" =~ ^[a-z0-9]{6}\.[a-z0-9]{16}$ ]]; then
      why="malformed kubeadm-join-token"
    elif [[ ! "$ca" =~ ^sha256:[a-f0-9]{64}$ ]]; then
      why="malformed kubeadm-ca-hash"
    elif [[ ! "$cp" =~ ^[][A-Za-z0-9.:-]+$ ]]; then
      why="malformed kubeadm-control-plane-ip"
    fi
    if [[ -z "$why" ]]; then break; fi
    if ((attempt >= HS_POLL_ATTEMPTS)); then
      hs_log "join values: ${why}; giving up after ${attempt} attempts"
      return 1
    fi
    hs_log "join values: ${why} (attempt ${attempt}/${HS_POLL_ATTEMPTS})"
    hs_sleep_ms "$delay_ms"
    delay_ms=$((delay_ms * 2))
    if ((delay_ms > HS_POLL_MAX_DELAY_MS)); then delay_ms="$HS_POLL_MAX_DELAY_MS"; fi
    attempt=$((attempt + 1))
  done
  HS_JOIN_TOKEN="$token"
  HS_CA_HASH="$ca"
  HS_CONTROL_PLANE="$cp"
  hs_log "join values found in the metadata (control plane ${HS_CONTROL_PLANE})"
}

# host, host:port, [v6], [v6]:port or a bare IPv6 address → an endpoint with a port.
hs_api_endpoint() {
  local addr="$1"
  if [[ "$addr" == \[*\]:* ]]; then
    printf '%s' "$addr"
  elif [[ "$addr" == \[*\] ]]; then
    printf '%s:%s' "$addr" "$HS_DEFAULT_API_PORT"
  elif [[ "$addr" == *:*:* ]]; then
    printf '[%s]:%s' "$addr" "$HS_DEFAULT_API_PORT"
  elif [[ "$addr" == *:* ]]; then
    printf '%s' "$addr"
  else
    printf '%s:%s' "$addr" "$HS_DEFAULT_API_PORT"
  fi
}

# Writes the kubeadm JoinConfiguration (readable by root only) to <path>.
hs_write_join_config() {
  local path="$1" endpoint labels=""
  endpoint="$(hs_api_endpoint "$HS_CONTROL_PLANE")"
  if [[ -n "$HS_KUBE_LABELS" ]]; then
    labels=$'\n'"    - name: node-labels"$'\n'"      value: \"${HS_KUBE_LABELS}\""
  fi
  mkdir -p "$(dirname "$path")"
  (
    umask 077
    cat >"$path" <<EOF
apiVersion: kubeadm.k8s.io/v1beta4
kind: JoinConfiguration
discovery:
  bootstrapToken:
    token: "${HS_JOIN_TOKEN}"
    apiServerEndpoint: "${endpoint}"
    caCertHashes:
      - "${HS_CA_HASH}"
nodeRegistration:
  name: "${HS_INSTANCE}"
  taints:
    - key: google.com/tpu
      value: present
      effect: NoSchedule
  kubeletExtraArgs:
    - name: provider-id
      value: "gce://${HS_PROJECT}/${HS_ZONE}/${HS_INSTANCE}"${labels}
EOF
  )
}

# "1.31", "v1.31" or "1.31.2" → "v1.31" (the package repository is per minor version).
hs_minor_version() {
  local v="${1#v}"
  if [[ ! "$v" =~ ^([0-9]+)\.([0-9]+)(\.[0-9]+)?$ ]]; then
    return 1
  fi
  printf 'v%s.%s' "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}"
}

# Kernel modules, sysctls and swap as kubeadm's preflight checks want them.
hs_prepare_host() {
  swapoff -a
  sed -i '/\sswap\s/ s/^/#/' /etc/fstab
  cat >/etc/modules-load.d/k8s.conf <<EOF
overlay
br_netfilter
EOF
  modprobe overlay
  modprobe br_netfilter
  cat >/etc/sysctl.d/99-kubernetes.conf <<EOF
net.bridge.bridge-nf-call-iptables = 1
net.bridge.bridge-nf-call-ip6tables = 1
net.ipv4.ip_forward = 1
EOF
  sysctl --system >/dev/null
}

# containerd (the distribution's package, systemd cgroups) and kubeadm/kubelet/kubectl for the
# minor version, held at that version. Where the Kubernetes packages come from is the user's
# choice, never ours: an image that already has kubeadm and kubelet is used as is; otherwise the
# apt repository named by the instance metadata attribute `kubernetes-apt-repository` (a
# `deb`-style base URL for the minor version, which must also serve `Release.key`; set it in
# spec.instanceConfig.metadata) is added; otherwise the apt sources the image already has are
# used. A repository URL may contain @MINOR@, replaced with e.g. v1.31.
hs_install_packages() {
  local minor pin=""
  if ! minor="$(hs_minor_version "$HS_KUBERNETES_VERSION")"; then
    hs_log "unsupported Kubernetes version '${HS_KUBERNETES_VERSION}'"
    return 1
  fi
  if [[ "${HS_KUBERNETES_VERSION#v}" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
    pin="=${HS_KUBERNETES_VERSION#v}-*"
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q apt-transport-https ca-certificates curl gpg containerd conntrack
  if command -v kubeadm >/dev/null && command -v kubelet >/dev/null; then
    hs_log "kubeadm and kubelet are already installed; using them"
  else
    local repo=""
    repo="$(hs_metadata_get instance/attributes/kubernetes-apt-repository || true)"
    repo="${repo//@MINOR@/${minor}}"
    if [[ -n "$repo" ]]; then
      if [[ ! "$repo" =~ ^https://[A-Za-z0-9.:/@_~+-]+/$ ]]; then
        hs_log "metadata kubernetes-apt-repository must be an https URL ending in /"
        return 1
      fi
      install -d -m 755 /etc/apt/keyrings
      curl -fsSL "${repo}Release.key" |
        gpg --dearmor --yes -o /etc/apt/keyrings/kubernetes-apt-keyring.gpg
      echo "deb [signed-by=/etc/apt/keyrings/kubernetes-apt-keyring.gpg] ${repo} /" \
        >/etc/apt/sources.list.d/kubernetes.list
      apt-get update -q
    fi
    if ! apt-get install -y -q "kubelet${pin}" "kubeadm${pin}" "kubectl${pin}"; then
      hs_log "kubeadm/kubelet ${minor} are not installable: use an image that has them or set" \
        "the instance metadata attribute kubernetes-apt-repository"
      return 1
    fi
    apt-mark hold kubelet kubeadm kubectl
  fi

  mkdir -p /etc/containerd
  containerd config default >/etc/containerd/config.toml
  sed -i 's/SystemdCgroup = false/SystemdCgroup = true/' /etc/containerd/config.toml
  systemctl restart containerd
  systemctl enable --now kubelet
}

# kubeadm join with retries; each attempt re-reads the join values (the operator replaces a
# token that is about to expire) and starts from a reset node.
hs_join() {
  local attempt=1
  while :; do
    hs_poll_join_values
    hs_write_join_config "$HS_JOIN_CONFIG"
    if kubeadm join --config "$HS_JOIN_CONFIG"; then
      rm -f "$HS_JOIN_CONFIG"
      hs_log "joined the cluster as ${HS_INSTANCE}"
      return 0
    fi
    if ((attempt >= HS_JOIN_ATTEMPTS)); then
      rm -f "$HS_JOIN_CONFIG"
      hs_log "kubeadm join failed ${attempt} times; giving up"
      return 1
    fi
    hs_log "kubeadm join failed (attempt ${attempt}/${HS_JOIN_ATTEMPTS}); resetting and retrying"
    kubeadm reset -f >/dev/null 2>&1 || true
    hs_sleep_ms "$HS_JOIN_RETRY_DELAY_MS"
    attempt=$((attempt + 1))
  done
}

main() {
  if [[ -s "$HS_KUBELET_KUBECONFIG" ]]; then
    hs_log "already joined (${HS_KUBELET_KUBECONFIG} exists)"
    return 0
  fi
  hs_fetch_identity
  hs_log "bootstrapping ${HS_INSTANCE} (project ${HS_PROJECT}, zone ${HS_ZONE}, Kubernetes ${HS_KUBERNETES_VERSION})"
  hs_prepare_host
  hs_install_packages
  hs_join
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  main "$@"
fi
