# podunit — developer entry points. `make test` is what CI runs.
CARGO ?= cargo
PREFIX ?= /usr
DESTDIR ?=

.PHONY: all build release setup test test-unit test-e2e rootfs controlplane lint fmt bench bench-generator bench-reload bench-cluster bench-images bench-probes bench-kubelet demo deb rpm install uninstall fuzz fake-apiserver

all: build

build:
	$(CARGO) build --workspace

# Two builds, so the generator's copy of the library is compiled without the `cli` feature (a
# workspace-wide build would unify features and link CLI code into the generator).
release:
	$(CARGO) build --release -p podunit --bins
	$(CARGO) build --release -p podunit-generator

# The suites with `test = false` in Cargo.toml, by the target that runs them (test-e2e,
# test-packaging, bench-*). They are not among --all-targets: clippy checks them by name.
# docs/testing.md explains their names: `<feature>[_<aspect>]_<what it runs against>`.
E2E_SUITES := --test lifecycle_e2e --test fields_e2e --test sync_e2e --test sandbox_e2e \
	--test probes_e2e --test images_e2e --test cluster_e2e --test cluster_apiserver_e2e --test kubelet_e2e \
	--test network_pods_e2e --test workloads_e2e
PACKAGING_SUITES := --test packaging_cli --test packaging_e2e
BENCH_SUITES := --test bench_reload --test bench_cluster --test bench_images --test bench_probes \
	--test bench_kubelet
MANUAL_SUITES := $(E2E_SUITES) $(PACKAGING_SUITES) $(BENCH_SUITES)

# The generator alone as well: it builds the library without the `cli` feature, which a
# workspace-wide run never sees (features unify), so a warning only that build has fails here.
lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) clippy -p podunit-generator -- -D warnings
	$(CARGO) clippy $(MANUAL_SUITES) -- -D warnings

fmt:
	$(CARGO) fmt --all

# What the tests need on this machine, installed when missing and said as it goes (root):
# Debian packages, the package builders, the rootfs and the control plane (tests/setup.sh).
setup:
	V="$(V)" tests/setup.sh test

# Unit, golden and round-trip tests, then the real-systemd suite (needs root, systemd-nspawn, debootstrap).
test: setup lint test-unit test-e2e test-packaging

test-unit:
	$(CARGO) test --workspace

# The test double of the Kubernetes API server, as a binary for end-to-end tests and benchmarks.
fake-apiserver:
	$(CARGO) build -p fake-apiserver

# V=1: the builds' and debootstrap's full output (make demo, make rootfs).
V ?=
QUIET := $(if $(filter 1,$(V)),,--quiet)

# The cached Debian rootfs the real-systemd suite boots (outside the repo; PODUNIT_TEST_ROOTFS moves it).
rootfs:
	V="$(V)" tests/machine/make-rootfs.sh

# etcd and a kube-apiserver built from Debian's kubernetes source package, cached outside the repo
# (PODUNIT_TEST_CACHE moves it; about 10 minutes the first time, a no-op after).
controlplane:
	tests/controlplane/install.sh

# Real systemd end to end: each test boots its own nspawn machine. E2E_JOBS machines at a time.
E2E_JOBS ?= 4
test-e2e: rootfs controlplane
	$(CARGO) test --workspace --no-fail-fast $(E2E_SUITES) -- --test-threads=$(E2E_JOBS)

# Boots a throwaway systemd machine, installs the release build (as `make release` makes it, and as
# the packages ship it), runs examples/*.yaml, shows status and logs. Installs what it needs first
# (root: systemd-container, debootstrap, the rootfs). Quiet unless V=1; PODUNIT_DEMO_KEEP=1 leaves
# the machine running.
demo:
	V="$(V)" tests/setup.sh demo
	$(CARGO) build $(QUIET) --release -p podunit --bins
	$(CARGO) build $(QUIET) --release -p podunit-generator
	tests/machine/demo.sh

# --- Packages and source installs (packaging/files.tsv lists every installed file) -------------
VERSION := $(shell sed -n 's/^version = "\([^"]*\)"/\1/p' Cargo.toml | head -n 1)
STAGE := target/packaging
PKGDIR := target/packages
MANPAGES := podunit.1 pods.d.5 podunit-sync.8 podunit-generator.8

.PHONY: stage packages test-packaging

# Files made from the built binaries and the sources: compressed man pages, completions, changelog.
stage: release
	rm -rf $(STAGE) && mkdir -p $(STAGE)/man $(STAGE)/completions
	for m in $(MANPAGES); do \
	  sed 's/^\(\.TH [^ ]* [0-9] ""\) "podunit"/\1 "podunit $(VERSION)"/' packaging/man/$$m \
	    | gzip -9n > $(STAGE)/man/$$m.gz; done
	target/release/podunit completions bash > $(STAGE)/completions/podunit.bash
	target/release/podunit completions zsh > $(STAGE)/completions/_podunit
	target/release/podunit completions fish > $(STAGE)/completions/podunit.fish
	packaging/changelog.sh $(VERSION) > $(STAGE)/changelog

deb: stage
	mkdir -p $(PKGDIR)
	$(CARGO) deb -p podunit --no-build --no-strip -o $(PKGDIR)/podunit_$(VERSION)-1_$(shell dpkg --print-architecture).deb

rpm: stage
	mkdir -p $(PKGDIR)
	$(CARGO) generate-rpm -p . -o $(PKGDIR)/podunit-$(VERSION)-1.$(shell uname -m).rpm

# One release build, both packages.
packages: deb rpm

# Checks the built packages, `make install` and the .deb on a booted systemd (root, nspawn).
test-packaging: packages
	$(CARGO) test $(PACKAGING_SUITES)

# Builds what it installs first, so a fresh clone installs too; without cargo (root's PATH under
# sudo), installs what an earlier `make stage` left.
install:
	@if command -v $(CARGO) >/dev/null; then $(MAKE) --no-print-directory stage; \
	else echo "make install: no $(CARGO) on PATH: installing what make stage built before" >&2; fi
	DESTDIR="$(DESTDIR)" PREFIX="$(PREFIX)" packaging/install.sh install

uninstall:
	DESTDIR="$(DESTDIR)" PREFIX="$(PREFIX)" packaging/install.sh uninstall

# Benchmarks (never timed tests). Reload-to-running on a real systemd: needs root and systemd-nspawn.
bench: bench-generator bench-reload bench-cluster bench-images bench-probes bench-kubelet

# The release generator as a process on 1 to 10000 pods: wall time and peak RSS (docs/benchmarks.md).
# BENCH_RUNS=N changes the runs per size.
bench-generator:
	$(CARGO) build --release -p podunit-generator
	$(CARGO) run --release -p podunit-bench -- $${CARGO_TARGET_DIR:-target}/release/podunit-generator

bench-reload: rootfs
	$(CARGO) test --release --test bench_reload

# Cluster mode in the API server double: 110 pods one at a time, then 80 of them replaced at once;
# create -> running -> status posted (p50/p99/max), then podunit-sync's RSS and CPU while idle
# with 110 pods (BENCH_IDLE_SECS, default 60).
bench-cluster: rootfs
	$(CARGO) test --release --test bench_cluster

# 110 pods with a liveness and a readiness httpGet probe every 10 s: podunit-sync's CPU and RSS
# over BENCH_IDLE_SECS (default 60), next to the same pods without probes.
bench-probes: rootfs
	$(CARGO) test --release --test bench_probes

# The kubelet API against the real kube-apiserver: podunit-sync's memory with the server off, on
# and after requests; /containerLogs throughput, plain and follow, against journalctl
# (BENCH_LOG_LINES, default 200000). Needs the control plane (make controlplane).
bench-kubelet: rootfs controlplane
	$(CARGO) test --release --test bench_kubelet

# Pulling a ~100 MB image against skopeo copy, unpacking it against tar -xf, and daemon-reload to
# running for pods whose image is in the store against the same pods with `image: host` (nspawn).
bench-images: rootfs
	$(CARGO) test --release --test bench_images

# Fuzzing, separate from `make test`: runs every target under fuzz/ for FUZZ_TIME seconds each.
# cargo-fuzz needs a nightly toolchain (sanitizers); without one, use the stable toolchain with
# `RUSTC_BOOTSTRAP=1 make fuzz FUZZ_TOOLCHAIN=` (RUSTC_BOOTSTRAP unlocks nightly flags on stable).
FUZZ_TIME ?= 60
FUZZ_TOOLCHAIN ?= +nightly
# The manifest target starts from the golden fixtures and examples, unpack from the layers that
# fuzz/seeds/unpack.py writes; fuzz/dict/<target>.dict, when there is one, gives libFuzzer the
# syntax's tokens. -timeout and -rss_limit_mb make a hang or runaway memory a failure.
fuzz:
	command -v cargo-fuzz >/dev/null || $(CARGO) install cargo-fuzz --locked
	mkdir -p fuzz/corpus/manifest
	for f in generator/tests/golden/*/pods.d/* examples/*.yaml; do \
	  cp "$$f" "fuzz/corpus/manifest/seed-$$(echo "$$f" | tr / _)"; \
	done
	python3 fuzz/seeds/unpack.py fuzz/corpus/unpack
	python3 fuzz/seeds/frames.py fuzz/corpus
	set -e; for t in $$($(CARGO) $(FUZZ_TOOLCHAIN) fuzz list); do \
	  dict=; [ ! -f fuzz/dict/$$t.dict ] || dict=-dict=$(CURDIR)/fuzz/dict/$$t.dict; \
	  $(CARGO) $(FUZZ_TOOLCHAIN) fuzz run $$t -- -max_total_time=$(FUZZ_TIME) \
	    -timeout=10 -rss_limit_mb=1024 $$dict; \
	done
