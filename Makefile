# Stead: `make run` starts everything on this machine, `make test` runs every test.
# Everything is set up from a fresh clone: the venv here, control-plane binaries cached by
# version outside the repo (~/.cache/stead, or $STEAD_CACHE), and as root buildah and mmdebstrap
# for the image (apt-get; the image's Debian base is cached there too).

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
IMAGE  ?= localhost/stead:dev

.PHONY: venv run run-chart test unit e2e lint typecheck crds argocd controlplane flux-tools image image-tools ssh-tools node-tools browser-tools bench bench-check clean

venv: $(STAMP)

# One line before each long step (pip is quiet, and the first install takes minutes); nothing once the
# stamp is newer than pyproject.toml.
$(STAMP): pyproject.toml
	@echo "venv: creating the virtual environment $(VENV)"
	$(PYTHON) -m venv $(VENV)
	@echo "venv: installing Stead and its dependencies into $(VENV) (pip; this takes a few minutes the first time)"
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@
	@echo "venv: ready"

controlplane: venv ## build (once) and cache kube-apiserver, kube-controller-manager, kubectl, etcd, helm, kubelet, kube-scheduler
	$(BIN)/stead cluster build

flux-tools: venv ## build (once) and cache Flux's source-controller and kustomize-controller (the GitOps e2e test's loop)
	$(BIN)/stead cluster build --flux

# ARGS: more flags of `stead operator` (`make run ARGS='--ssh-allow 10.20.0.0/24 -v'`).
ARGS ?=
run: venv ## start a local control plane unless a cluster is reachable, install CRDs, run the operators and the console
	$(BIN)/stead operator --local auto --console-port 8090 $(ARGS)

# The chart on the local node, as on a real cluster: the image built with buildah, loaded into the
# node's containerd (no registry), and installed by helm; the operator authenticates with its
# ServiceAccount. The store is an emptyDir here (the node has no volume provisioner); Ctrl-C is not
# needed: `stead cluster down` stops the node and the plane.
CHART_NAMESPACE ?= stead-system
run-chart: venv controlplane node-tools image ## the chart on the local node (root): image loaded, helm install --wait
	$(BIN)/stead cluster up --node always
	$(BIN)/stead cluster load-image $(IMAGE)
	"$$($(BIN)/stead cluster helm)" upgrade --install stead charts/stead --kubeconfig "$$($(BIN)/stead cluster kubeconfig)" \
		--namespace $(CHART_NAMESPACE) --create-namespace --wait --timeout 5m \
		--set image.repository=$(firstword $(subst :, ,$(IMAGE))),image.tag=$(lastword $(subst :, ,$(IMAGE))) \
		--set image.pullPolicy=Never,actions.jobs.image=$(IMAGE),persistence.enabled=false

lint: venv
	$(BIN)/ruff check operators pipelines tests bench
	$(BIN)/lint-imports

typecheck: venv
	$(BIN)/mypy

crds: venv ## regenerate crds/ from the models
	$(BIN)/stead crds

# One source (charts/stead/argocd/source), one file per kind in Argo CD's layout: Argo CD shares no script
# between kinds. tests/unit/test_argocd.py fails when the generated files are stale.
argocd: venv ## regenerate the Argo CD health checks and actions (charts/stead/argocd/resource_customizations)
	$(BIN)/python -m tests.argocd

# pytest-xdist: two workers, the unit tests by module (module-scoped fixtures, e.g. sshd nodes, start once).
unit: venv ssh-tools
	$(BIN)/pytest -q -n 2 --dist loadscope tests/unit

image-tools: ## buildah and mmdebstrap, installed with apt-get when missing (as root; tests/e2e/test_image.py needs them)
	sh scripts/build-image.sh tools

image: ## build $(IMAGE) from the Dockerfile with buildah, on a local Debian base (STEAD_BASE_IMAGE=... to choose one)
	sh scripts/build-image.sh build $(IMAGE)

# OpenSSH's server binary only: the tests start their own sshd processes (tests/sshd.py), on
# loopback addresses and free ports with generated keys, never the system service. Without a
# running init (a container) Debian's invoke-rc.d does not start the service; on a systemd host
# apt-get starts it as any openssh-server install does.
ssh-tools: ## sshd and rsync, installed with apt-get when missing (as root; the ssh step tests need them)
	@if [ -x /usr/sbin/sshd ] && command -v rsync >/dev/null; then exit 0; fi; \
	if [ "$$(id -u)" != 0 ]; then \
		echo "ssh-tools: sshd or rsync missing: as root, this installs them (the ssh tests are skipped meanwhile)" >&2; \
		exit 0; fi; \
	echo "ssh-tools: installing openssh-server and rsync (apt-get)" >&2; \
	apt-get update -qq && \
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends openssh-server rsync >/dev/null

# The local node (operators/cluster/node.py): Debian's containerd, runc and CNI plugins. containerd's
# own service is not started (no init in a container; on a systemd host apt-get starts it, and the
# node runs its own containerd beside it, on its own socket).
node-tools: ## containerd, runc and the CNI plugins, installed with apt-get when missing (as root; the local node needs them)
	@if command -v containerd >/dev/null && command -v runc >/dev/null && [ -x /usr/lib/cni/bridge ]; then exit 0; fi; \
	if [ "$$(id -u)" != 0 ]; then \
		echo "node-tools: containerd, runc or the CNI plugins missing: as root, this installs them (no local node meanwhile)" >&2; \
		exit 0; fi; \
	echo "node-tools: installing containerd, runc and containernetworking-plugins (apt-get)" >&2; \
	apt-get update -qq && \
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends -o DPkg::Lock::Timeout=600 \
		containerd runc containernetworking-plugins iptables >/dev/null

# Debian's Chromium, for the console's browser tests (tests/e2e/console.py drives it with Playwright, whose own
# browser downloads cannot run here).
browser-tools: ## chromium, installed with apt-get when missing (as root; the console's browser tests need it)
	@if command -v chromium >/dev/null; then exit 0; fi; \
	if [ "$$(id -u)" != 0 ]; then \
		echo "browser-tools: chromium missing: as root, this installs it (the console's browser tests fail meanwhile)" >&2; \
		exit 0; fi; \
	echo "browser-tools: installing chromium (apt-get)" >&2; \
	apt-get update -qq && \
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends -o DPkg::Lock::Timeout=600 \
		chromium >/dev/null

e2e: venv controlplane flux-tools image-tools ssh-tools node-tools browser-tools
	$(BIN)/pytest -q tests/e2e

# Two workers: the unit tests run beside the e2e session (tests/conftest.py keeps tests/e2e in one
# worker: one control plane, one node, the tests in their order; loadscope keeps a module's tests,
# and its module-scoped fixtures, in one worker). `make test PYTEST_ARGS=` runs serially.
PYTEST_ARGS ?= -n 2 --dist loadscope
test: venv controlplane flux-tools image-tools ssh-tools node-tools browser-tools lint typecheck
	$(BIN)/stead crds --check
	$(BIN)/pytest -q $(PYTEST_ARGS) --durations=25 tests

bench: venv controlplane
	$(BIN)/python bench/pipeline_throughput.py

# Not in CI (a few minutes, wants a quiet machine): short benches by bench/baseline.toml's commit and by this
# tree, alternately in one run; exit 1 naming the figure that regressed beyond its tolerance.
bench-check: venv
	$(BIN)/python bench/check.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
