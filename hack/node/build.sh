#!/usr/bin/env bash
# Builds what a real node of the development cluster runs besides migdra (docs/real-node.md): the upstream
# kubelet from the pinning module of each minor (hack/kube/<minor>/go.mod, into .tools/kube/<version>/bin/,
# beside that minor's control plane), containerd with its runc shim and ctr, and crictl, from their Go
# modules at the versions pinned below (into .tools/node/bin/).  runc, the CNI plugins and busybox come from
# Debian (.ci/run installs them); the images are built by migdra_devcluster.node.images, not here.
# Usage: hack/node/build.sh [MINOR ...]   (default: 1.36)
#
# Why these: Debian's containerd is 1.6, which has no CDI; containerd 2.x has it on by default.  The
# tags leave out the snapshotters that need cgo or kernel modules this machine does not have.  `go install
# module@version` builds exactly that release with its own go.mod and checks it against the checksum
# database, so nothing upstream is copied here.  Idempotent: a binary that reports its version is kept.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
NODE_BIN="${NODE_TOOLS_DIR:-$ROOT/.tools/node}/bin"
CONTAINERD_VERSION=v2.2.9
CRICTL_VERSION=v1.37.0
MINORS=("$@")
[[ ${#MINORS[@]} -gt 0 ]] || MINORS=(1.36)

command -v go >/dev/null 2>&1 || { echo "node: the go command is needed (Go 1.26 or newer)" >&2; exit 1; }

# What a binary prints for its version flag (the runc shim knows only `-v`), read whole: `| grep -q` would
# close the pipe early and fail the pipeline under pipefail.
reported_version() {
  if [[ "$(basename "$1")" == containerd-shim-* ]]; then "$1" -v 2>&1 || true; else "$1" --version 2>&1 || true; fi
}

# name, package, the string its version must say, extra go flags
install_one() {
  local name="$1" package="$2" expected="$3"
  shift 3
  if [[ -x "$NODE_BIN/$name" ]] && [[ "$(reported_version "$NODE_BIN/$name")" == *"$expected"* ]]; then
    echo "node: $name $expected already built"
    return
  fi
  echo "node: building $name ($package)"
  mkdir -p "$NODE_BIN"
  GOBIN="$NODE_BIN" CGO_ENABLED=0 go install -trimpath "$@" "$package"
  if [[ "$(reported_version "$NODE_BIN/$name")" != *"$expected"* ]]; then
    echo "node: $NODE_BIN/$name does not say it is '$expected':" >&2
    reported_version "$NODE_BIN/$name" >&2
    return 1
  fi
}

for minor in "${MINORS[@]}"; do
  "$ROOT/hack/kube/build.sh" --kubelet "$minor"
done

containerd_tags=(-tags "no_btrfs no_devmapper no_zfs")
containerd_stamp="-X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION"
for name in containerd ctr containerd-shim-runc-v2; do
  install_one "$name" "github.com/containerd/containerd/v2/cmd/$name@$CONTAINERD_VERSION" "$CONTAINERD_VERSION" \
    "${containerd_tags[@]}" -ldflags "-s -w $containerd_stamp"
done
install_one crictl "sigs.k8s.io/cri-tools/cmd/crictl@$CRICTL_VERSION" "$CRICTL_VERSION" \
  -ldflags "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=$CRICTL_VERSION"

missing=()
for program in runc /usr/lib/cni/bridge /usr/lib/cni/host-local /usr/lib/cni/loopback busybox iptables; do
  command -v "$program" >/dev/null 2>&1 || [[ -x "$program" ]] || missing+=("$program")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "node: missing from the host: ${missing[*]} (Debian: apt-get install runc containernetworking-plugins" \
    "busybox-static iptables conntrack socat)" >&2
  exit 1
fi
echo "node: ready in $NODE_BIN"
