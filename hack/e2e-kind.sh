#!/usr/bin/env bash
# End to end on a real Kubernetes: a kind cluster, migdra's image, the Helm chart in simulated mode
# (no GPUs: the plugin runs on simulated NVML, CDI specs carry no device nodes or driver files), the
# workloads of demo/ with a runnable image, `kubectl describe resourceclaim`, and the clean-up check.
#
# It needs docker (with access to Docker Hub and registry.k8s.io), kind >= 0.27, kubectl and helm.
# migdra's development and CI machines have none of these reachable, so it does not run there; the
# chart's tests (tests/integration/helm) and shellcheck (tests/integration/test_shellcheck.py) keep it correct.
#
#   hack/e2e-kind.sh                      # create, test, delete the cluster
#   KEEP=1 hack/e2e-kind.sh               # keep the cluster afterwards (kind delete cluster --name migdra-e2e)
#   KIND_NODE_IMAGE=kindest/node:v1.36.0 KIND_FEATURE_GATES="" hack/e2e-kind.sh
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CLUSTER="${CLUSTER:-migdra-e2e}"
KIND_NODE_IMAGE="${KIND_NODE_IMAGE:-kindest/node:v1.35.0}"
# 1.35 has partitionable devices (the shared counters every MIG placement consumes), device taints and
# DeviceClass extended resources as alpha; from 1.36 they are beta and on, so give KIND_FEATURE_GATES="".
KIND_FEATURE_GATES="${KIND_FEATURE_GATES-DRAPartitionableDevices DRADeviceTaints DRAExtendedResource}"
IMAGE="${IMAGE:-migdra:e2e}"
NAMESPACE="${NAMESPACE:-gpu-system}"
RELEASE="${RELEASE:-migdra}"
DRIVER="${DRIVER:-gpu.migdra.io}"
# The demo pods' image is a placeholder the local cluster never pulls; kind runs them for real.
WORKLOAD_IMAGE="${WORKLOAD_IMAGE:-registry.k8s.io/pause:3.10}"
UNFIT_POD="too-big"  # demo/07-does-not-fit.yaml: must stay Pending with a FailedScheduling Event
TIMEOUT="${TIMEOUT:-300s}"
KEEP="${KEEP:-0}"

say() { printf '\n== %s\n' "$*"; }
die() { printf 'e2e-kind: %s\n' "$*" >&2; exit 1; }
for tool in docker kind kubectl helm; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool is needed (see the comment at the top of $0)"
done

work="$(mktemp -d)"
cleanup() {
  status=$?
  if [[ $status -ne 0 ]]; then
    say "FAILED: what the cluster says"
    kubectl get pods -A -o wide || true
    kubectl -n "$NAMESPACE" logs "daemonset/$RELEASE-kubelet-plugin" --tail=100 || true
    kubectl get events -A --sort-by=.lastTimestamp | tail -40 || true
  fi
  if [[ "$KEEP" != 1 ]]; then
    kind delete cluster --name "$CLUSTER" >/dev/null 2>&1 || true
  fi
  rm -rf "$work"
  exit "$status"
}
trap cleanup EXIT

say "kind cluster $CLUSTER ($KIND_NODE_IMAGE): one control plane, two workers as 'GPU nodes'"
{
  echo "kind: Cluster"
  echo "apiVersion: kind.x-k8s.io/v1alpha4"
  if [[ -n "$KIND_FEATURE_GATES" ]]; then
    echo "featureGates:"
    for gate in $KIND_FEATURE_GATES; do echo "  $gate: true"; done
  fi
  echo "nodes:"
  echo "- role: control-plane"
  echo "- role: worker"
  echo "- role: worker"
} > "$work/kind.yaml"
kind create cluster --name "$CLUSTER" --image "$KIND_NODE_IMAGE" --config "$work/kind.yaml" --wait 120s
kubectl config use-context "kind-$CLUSTER" >/dev/null

say "image $IMAGE, loaded into the nodes"
make -C "$REPO" image IMAGE="$IMAGE"
kind load docker-image "$IMAGE" --name "$CLUSTER"

say "helm install (simulated GPUs, the example DeviceClasses for demo/06)"
helm install "$RELEASE" "$REPO/helm/migdra" --namespace "$NAMESPACE" --create-namespace \
  -f "$REPO/helm/migdra/ci/simulated-values.yaml" \
  --set "driverName=$DRIVER" \
  --set "image.repository=${IMAGE%:*}" --set "image.tag=${IMAGE##*:}" --set image.pullPolicy=Never \
  --set deviceClasses.examples=true \
  --wait --timeout "$TIMEOUT"
kubectl -n "$NAMESPACE" rollout status "daemonset/$RELEASE-kubelet-plugin" --timeout "$TIMEOUT"
kubectl -n "$NAMESPACE" rollout status "deployment/$RELEASE-controller" --timeout "$TIMEOUT"

say "every worker publishes its pool"
workers=$(kubectl get nodes -l '!node-role.kubernetes.io/control-plane' -o name | wc -l)
deadline=$((SECONDS + 120))
until [[ $(kubectl get resourceslices --field-selector "spec.driver=$DRIVER" \
          -o jsonpath='{range .items[*]}{.spec.nodeName}{"\n"}{end}' | sort -u | grep -c .) -ge $workers ]]; do
  [[ $SECONDS -lt $deadline ]] || die "not every worker published ResourceSlices within 120 s"
  sleep 2
done
kubectl get resourceslices --field-selector "spec.driver=$DRIVER"

say "the workloads of demo/ (image $WORKLOAD_IMAGE)"
for manifest in "$REPO"/demo/0*.yaml; do
  sed -E "s#^([[:space:]]*image:).*#\1 $WORKLOAD_IMAGE#" "$manifest" | kubectl apply -f -
done
pods=$(kubectl get pods -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}' | grep -vx "$UNFIT_POD")
for pod in $pods; do
  kubectl wait --for=condition=Ready "pod/$pod" --timeout "$TIMEOUT"
done
kubectl get pods -o wide

say "kubectl describe resourceclaim"
kubectl describe resourceclaims

say "every claim is Reserved by the controller and realized on its node (MIG UUID in status.devices)"
for claim in $(kubectl get resourceclaims -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}'); do
  owner=$(kubectl get resourceclaim "$claim" -o jsonpath='{.metadata.ownerReferences[0].name}')
  [[ "$owner" == "$UNFIT_POD" ]] && continue
  data=$(kubectl get resourceclaim "$claim" -o jsonpath='{.status.devices[*].data}')
  conditions=$(kubectl get resourceclaim "$claim" -o jsonpath='{.status.devices[*].conditions[*].type}')
  [[ "$data" == *migUUID* ]] || die "claim $claim has no MIG UUID in status.devices: $data"
  [[ "$conditions" == *Ready* && "$conditions" == *Reserved* ]] || die "claim $claim: conditions $conditions"
done

say "$UNFIT_POD does not fit, and says why"
kubectl get events --field-selector "involvedObject.name=$UNFIT_POD,reason=FailedScheduling" -o name | grep -q . \
  || die "$UNFIT_POD has no FailedScheduling Event"
kubectl describe pod "$UNFIT_POD" | sed -n '/Events:/,$p'

say "the plugin's metrics and health (info series of the prepared instances)"
plugin_pod=$(kubectl -n "$NAMESPACE" get pods -l app.kubernetes.io/component=kubelet-plugin -o name | head -1)
kubectl -n "$NAMESPACE" port-forward "$plugin_pod" 19400:9400 >/dev/null 2>&1 &
forward=$!
sleep 3
curl -sf http://127.0.0.1:19400/metrics | grep -E '^migdra_(mig_instance_info|kubelet_registered)' || true
kill "$forward" 2>/dev/null || true

say "clean-up: deleting the workloads destroys exactly their instances"
for manifest in "$REPO"/demo/0*.yaml; do kubectl delete -f "$manifest" --wait=true --timeout "$TIMEOUT"; done
[[ -z "$(kubectl get resourceclaims -o name)" ]] || die "claims left after deleting their pods"
for pod in $(kubectl -n "$NAMESPACE" get pods -l app.kubernetes.io/component=kubelet-plugin -o name); do
  left=$(kubectl -n "$NAMESPACE" exec "$pod" -- migdra gpus --nvml simulated \
    --sim-state "/var/lib/kubelet/plugins/$DRIVER/simulated-gpus.json" -o json |
    python3 -c 'import json, sys; print(sum(len(g["gpuInstances"]) for g in json.load(sys.stdin)["gpus"]))')
  [[ "$left" -eq 0 ]] || die "$pod: $left GPU instances left after every claim was deleted"
done

say "PASSED"
