# benchfarm: the two commands of the README (make demo, make test) and the lab lifecycle.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export BENCHFARM_CACHE ?= $(HOME)/.cache/benchfarm

APT_PACKAGES := qemu-system-x86 microcom qemu-system-arm qemu-utils ipxe-qemu seabios busybox-static ser2net pdudaemon u-boot-qemu \
	openssh-server openssh-client rsync \
	sigrok-cli \
	pax-utils python3-pyelftools iperf3 cpio e2fsprogs openssl ca-certificates \
	postgresql
# The operator image without a daemon (make image): a Debian base, buildah, and umoci + runc to run it
# read-only in its test. Kept out of APT_PACKAGES: lab-up does not need them.
IMAGE_APT_PACKAGES := mmdebstrap buildah umoci runc
# The one-node cluster (make cluster-up and its stack test) only, likewise.
CLUSTER_APT_PACKAGES := containerd runc containernetworking-plugins umoci iptables
# The dashboard's browser test (tests/stack/test_web.py: a real Chromium through its WebDriver) only.
BROWSER_APT_PACKAGES := chromium chromium-driver
# The alerting rules' tests only: promtool check rules, test rules, check metrics
# (tests/unit/test_alerts.py) and a Prometheus scraping the lab's operator (a stack test starts its
# own). Debian's prometheus package ships both; on a host with systemd it also enables a server
# of its own (`systemctl disable --now prometheus` if it is not wanted).
PROMTOOL_APT_PACKAGES := prometheus

APT_STAMP := $(BENCHFARM_CACHE)/.apt-$(shell echo $(APT_PACKAGES) | md5sum | cut -c1-8)
IMAGE_APT_STAMP := $(BENCHFARM_CACHE)/.apt-image-$(shell echo $(IMAGE_APT_PACKAGES) | md5sum | cut -c1-8)
CLUSTER_APT_STAMP := $(BENCHFARM_CACHE)/.apt-cluster-$(shell echo $(CLUSTER_APT_PACKAGES) | md5sum | cut -c1-8)
BROWSER_APT_STAMP := $(BENCHFARM_CACHE)/.apt-browser-$(shell echo $(BROWSER_APT_PACKAGES) | md5sum | cut -c1-8)
PROMTOOL_APT_STAMP := $(BENCHFARM_CACHE)/.apt-promtool-$(shell echo $(PROMTOOL_APT_PACKAGES) | md5sum | cut -c1-8)

.PHONY: all deps image-deps cluster-deps browser-deps promtool-deps venv binaries helm-binary node-binaries lab-up lab-down lab-status cluster-up cluster-down operator image demo demo-cluster lint docs test test-full test-cluster unit chaos misuse campaigns bisection crds bench bench-scale bench-boot bench-history history-experiment clean

all: test

deps: $(APT_STAMP)

image-deps: $(IMAGE_APT_STAMP)

cluster-deps: $(CLUSTER_APT_STAMP)

browser-deps: $(BROWSER_APT_STAMP)

promtool-deps: $(PROMTOOL_APT_STAMP)

$(APT_STAMP): PKGS := $(APT_PACKAGES)
$(IMAGE_APT_STAMP): PKGS := $(IMAGE_APT_PACKAGES)
$(CLUSTER_APT_STAMP): PKGS := $(CLUSTER_APT_PACKAGES)
$(BROWSER_APT_STAMP): PKGS := $(BROWSER_APT_PACKAGES)
$(PROMTOOL_APT_STAMP): PKGS := $(PROMTOOL_APT_PACKAGES)
$(APT_STAMP) $(IMAGE_APT_STAMP) $(CLUSTER_APT_STAMP) $(BROWSER_APT_STAMP) $(PROMTOOL_APT_STAMP):
	@echo "[setup] apt packages: $(PKGS)"
	@missing=$$(for p in $(PKGS); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $$missing; \
	fi
	@mkdir -p $(BENCHFARM_CACHE) && touch $@

venv: $(STAMP)

$(STAMP): pyproject.toml devlab/pyproject.toml
	@echo "[setup] python virtual environment in $(VENV)"
	@test -x $(PY) || python3 -m venv $(VENV)
	@$(PY) -m pip install -q --upgrade pip
	@$(PY) -m pip install -q -e '.[test]' -e ./devlab
	@touch $@

# what the embedded lab runs (lab-up, make demo); helm only where a chart is linted or installed
binaries: deps
	@bash hack/build-binaries.sh etcd kubernetes minio

helm-binary: deps
	@bash hack/build-binaries.sh helm

# kubelet, kube-scheduler, kube-proxy: only for the one-node cluster (cluster-up, its stack test)
node-binaries:
	@bash hack/build-binaries.sh kubernetes_node

lab-up: deps venv binaries
	@$(VENV)/bin/benchfarm lab up

lab-down:
	@test -x $(VENV)/bin/benchfarm && $(VENV)/bin/benchfarm lab down || true

# A one-node cluster next to the lab: containerd, kubelet, kube-scheduler, kube-proxy (the node's
# binaries are built on first use); `make lab-down` removes it too.
cluster-up: lab-up cluster-deps node-binaries helm-binary
	@$(VENV)/bin/benchfarm lab cluster-up

cluster-down:
	@test -x $(VENV)/bin/benchfarm && $(VENV)/bin/benchfarm lab cluster-down || true

# benchfarm/operator:<version> from the Dockerfile with buildah, as an OCI archive under
# $(BENCHFARM_CACHE)/images (cached by content; prints the digest). REBUILD=1: from nothing, and
# check the digest is the one recorded for the same inputs.
image: image-deps venv
	@$(VENV)/bin/benchfarm lab image $(if $(REBUILD),--rebuild)

lab-status: venv
	@$(VENV)/bin/benchfarm lab status

crds: venv
	@$(PY) hack/sync_generated.py

demo: lab-up
	@$(VENV)/bin/benchfarm demo

# The same run on the one-node cluster: the image imported into containerd, helm install (2
# operator replicas, sessions as Jobs taken by warm session pods), kubectl apply three times, the
# results table and the median apply -> power-on and e2e ratio (RUNS=1: once).
demo-cluster: cluster-up image
	@$(VENV)/bin/benchfarm demo --cluster --runs $${RUNS:-3}

unit: venv promtool-deps
	@$(VENV)/bin/pytest -q -m 'not stack'

# ruff (lint only, no formatting) and mypy (strict on every module); pyproject.toml. mypy's
# cache lives with the other caches: it checks a file again only when its content changed (a
# fresh clone's new mtimes are compared by hash), so a clean clone is not checked from cold
lint: venv
	@$(VENV)/bin/ruff check .
	@$(VENV)/bin/mypy --cache-dir $(BENCHFARM_CACHE)/mypy

# The documentation site (docs/, Sphinx with MyST): reference pages generated from the code,
# warnings are errors, then every local link of the built pages checked; in docs/_build/html.
docs: venv
	@$(VENV)/bin/sphinx-build -W --keep-going -q -b html docs docs/_build/html
	@$(PY) hack/check_docs_links.py

test: lab-up helm-binary browser-deps promtool-deps
	@$(MAKE) --no-print-directory docs
	@$(VENV)/bin/lint-imports --config pyproject.toml
	@$(MAKE) --no-print-directory lint
	@$(VENV)/bin/pytest -q --durations=$${DURATIONS:-25}

# The operator image and the one-node cluster (containerd, kubelet, kube-scheduler, kube-proxy,
# built on first use: about 10 minutes cold), the chart installed there: the `full` tests that
# make test leaves to this target (it tests the chart on the light lab).
test-cluster: lab-up image-deps cluster-deps node-binaries
	@BENCHFARM_FULL=1 $(VENV)/bin/pytest -q -p no:cacheprovider tests/stack/test_image.py \
		tests/stack/test_cluster.py tests/stack/test_cluster_software.py tests/stack/test_demo_cluster.py

# make test with every scenario at its full size (the `full` variants: BENCHFARM_FULL=1); longer
# than CI's budget, for a release or a change to how runs survive.
test-full: image-deps cluster-deps node-binaries
	@BENCHFARM_FULL=1 BENCHFARM_CAMPAIGN_FULL=1 $(MAKE) --no-print-directory test

# What a tenant can try against the shared lab: one line per attempt at the end, non-zero on a breach.
# The console flood prints 1 GiB here (64 MiB in make test).
misuse: lab-up
	@BENCHFARM_FULL=1 BENCHFARM_BIG_OUTPUT=$${BENCHFARM_BIG_OUTPUT:-1073741824} $(VENV)/bin/pytest -q -p no:cacheprovider tests/misuse

# Runs surviving operator/runner kills, outages and bad boards: one line per scenario at the end.
chaos: lab-up
	@BENCHFARM_FULL=1 $(VENV)/bin/pytest -q -p no:cacheprovider tests/chaos

# The two example campaigns as written (4 iterations, 2 timed boots per column); make test runs
# them with one of each.
campaigns: lab-up
	@BENCHFARM_CAMPAIGN_FULL=1 $(VENV)/bin/pytest -q -p no:cacheprovider tests/stack/test_campaigns.py

# The issue-57 bisections on the arm64 board with the deterministic clock: 16 candidates and the
# bad build, slower from the 11th; the same with the 9th unbootable; no slowdown (~1 h). make test
# runs one of three builds.
bisection: lab-up
	@BENCHFARM_FULL=1 $(VENV)/bin/pytest -q -s -p no:cacheprovider tests/stack/test_bisection.py

bench: venv
	@$(PY) benchmarks/scheduler_bench.py
	@$(PY) benchmarks/places_bench.py 100 1000
	@$(PY) benchmarks/bisection_bench.py

# 1,000 simulated boards behind a real labgrid-exporter, 10,000 queued runs, the real control plane
# and coordinator; prints the table and writes .benchfarm/bench-scale.json (ARGS: --runs 2000 ...).
bench-scale: lab-up
	@$(PY) benchmarks/scale_bench.py $(ARGS)

# The results database at a lab's size: a generated year of nightly runs (365 x 20 board types x
# 200 metrics, 1.46 M rows) in its own database on the lab's PostgreSQL; prints one metric's
# history with change points and indexing a run (ARGS: --days 90 --types 5 ... for a smaller one).
bench-history: lab-up
	@$(PY) benchmarks/history_bench.py $(ARGS)

# Real runs on the arm64 board: 20 with a build that is slower from the 13th, 20 without; prints
# both histories, their change points and the false alarms over resampled quiet series (~30 min).
history-experiment: lab-up
	@$(PY) benchmarks/history_experiment.py $(ARGS)

bench-boot: lab-up
	@$(PY) benchmarks/boot_times.py vb-x86-1 5
	@$(PY) benchmarks/boot_times.py vb-a53-0 5

clean: lab-down
	rm -rf .benchfarm
