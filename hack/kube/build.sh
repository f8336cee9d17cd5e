#!/usr/bin/env bash
# Builds the upstream control plane for the real-Kubernetes test tier: etcd, kube-apiserver,
# kube-controller-manager and kube-scheduler, from the Go modules pinned in hack/kube/<minor>/go.mod, into
# .tools/kube/<version>/bin/ (git-ignored).  Usage: hack/kube/build.sh [--kubelet] [MINOR ...]   (default: 1.36)
# --kubelet builds the kubelet of those minors instead (`make node`, hack/node/build.sh): a real node's, not
# the control plane's, so `make kube` does not pay for it.
#
# Why this way: Kubernetes publishes its server components only as Go modules and release tarballs; the
# module proxy is what the project's machines reach.  `go build` of the pinned module is how any Go program
# is installed; nothing upstream is copied into the repository.  The version stamp (what `--version` and
# the API server's /version report) is set with -X as upstream's hack/lib/version.sh does, because a module
# build has no git tree to read it from.  Idempotent: a binary already built for that version is kept.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
DEST_ROOT="${KUBE_TOOLS_DIR:-$ROOT/.tools/kube}"
COMPONENTS=control-plane
if [[ "${1:-}" == --kubelet ]]; then
  COMPONENTS=kubelet
  shift
fi
MINORS=("$@")
[[ ${#MINORS[@]} -gt 0 ]] || MINORS=(1.36)

command -v go >/dev/null 2>&1 || { echo "kube: the go command is needed (Go 1.26 or newer)" >&2; exit 1; }

# The version a pinning module selects, read from its go.mod: `go list` would need the whole graph.
module_version() { awk -v m="$2" '$1 == m && $2 ~ /^v/ { print $2; exit }' "$1"; }

# What a binary's --version prints, read whole: `| grep -q` would close the pipe early, and the writer's
# SIGPIPE fails the pipeline under pipefail.
reported_version() { "$1" --version 2>/dev/null || true; }

build_minor() {
  local minor="$1" moddir="$ROOT/hack/kube/$1"
  [[ -f "$moddir/go.mod" ]] || { echo "kube: no pinning module hack/kube/$minor/go.mod" >&2; return 1; }
  local version etcd_version
  version="$(module_version "$moddir/go.mod" k8s.io/kubernetes)"
  etcd_version="$(module_version "$moddir/go.mod" go.etcd.io/etcd/server/v3)"
  local bin="$DEST_ROOT/$version/bin"
  mkdir -p "$bin"

  local major="${version#v}"; major="${major%%.*}"
  local stamp="" pkg
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    stamp+=" -X $pkg.gitVersion=$version -X $pkg.gitMajor=$major -X $pkg.gitMinor=${minor#*.}"
    stamp+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done

  # name, package, the string its --version must print
  local targets=(
    "etcd go.etcd.io/etcd/server/v3 etcd Version: ${etcd_version#v}"
    "kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver Kubernetes $version"
    "kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager Kubernetes $version"
    "kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler Kubernetes $version"
  )
  [[ $COMPONENTS == kubelet ]] && targets=("kubelet k8s.io/kubernetes/cmd/kubelet Kubernetes $version")
  local target name package expected
  for target in "${targets[@]}"; do
    read -r name package expected <<<"$target"
    if [[ -x "$bin/$name" ]] && [[ "$(reported_version "$bin/$name")" == *"$expected"* ]]; then
      echo "kube: $name $version already built"
      continue
    fi
    echo "kube: building $name ($package) for $version"
    (cd "$moddir" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w$stamp" -o "$bin/$name.new" "$package")
    mv "$bin/$name.new" "$bin/$name"
    if [[ "$(reported_version "$bin/$name")" != *"$expected"* ]]; then
      echo "kube: $bin/$name --version does not say '$expected':" >&2
      "$bin/$name" --version >&2 || true
      return 1
    fi
  done
  echo "kube: $version ready in $bin"
}

for minor in "${MINORS[@]}"; do
  build_minor "$minor"
done
