# Stead: `make run` starts everything on this machine, `make test` runs every test.
# Everything is set up from a fresh clone: the venv here, control-plane binaries cached by
# version outside the repo (~/.cache/stead, or $STEAD_CACHE).

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: venv run test unit e2e lint typecheck crds controlplane bench clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

controlplane: venv ## build (once) and cache kube-apiserver, kube-controller-manager, kubectl, etcd, helm
	$(BIN)/stead cluster build

run: venv ## start a local control plane unless a cluster is reachable, install CRDs, run the operators
	$(BIN)/stead run --local auto

lint: venv
	$(BIN)/ruff check operators pipelines tests bench
	$(BIN)/lint-imports

typecheck: venv
	$(BIN)/mypy

crds: venv ## regenerate crds/ from the models
	$(BIN)/stead crds

unit: venv
	$(BIN)/pytest -q tests/unit

e2e: venv controlplane
	$(BIN)/pytest -q tests/e2e

test: venv controlplane lint typecheck
	$(BIN)/stead crds --check
	$(BIN)/pytest -q tests

bench: venv controlplane
	$(BIN)/python bench/pipeline_throughput.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
