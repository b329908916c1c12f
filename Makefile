# podunit — developer entry points. `make test` is what CI runs.
CARGO ?= cargo
PREFIX ?= /usr
DESTDIR ?=

.PHONY: all build release test test-unit test-e2e rootfs lint fmt bench demo deb rpm install uninstall fuzz fake-apiserver

all: build

build:
	$(CARGO) build --workspace

release:
	$(CARGO) build --workspace --release

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

fmt:
	$(CARGO) fmt --all

# Unit, golden and round-trip tests, then the real-systemd suite (needs root, systemd-nspawn, debootstrap).
test: lint test-unit test-e2e

test-unit:
	$(CARGO) test --workspace

# The test double of the Kubernetes API server, as a binary for end-to-end tests and benchmarks.
fake-apiserver:
	$(CARGO) build -p fake-apiserver

# The cached Debian rootfs the real-systemd suite boots (outside the repo; PODUNIT_TEST_ROOTFS moves it).
rootfs:
	tests/e2e/make-rootfs.sh

# Real systemd end to end: each test boots its own nspawn machine. E2E_JOBS machines at a time.
E2E_JOBS ?= 3
test-e2e: rootfs
	$(CARGO) test --test e2e --test sync_e2e -- --test-threads=$(E2E_JOBS)

# Boots a throwaway systemd machine, installs this build, runs examples/*.yaml, shows status and logs.
demo: rootfs
	$(CARGO) build -p podunit --bins
	$(CARGO) build -p podunit-generator
	tests/e2e/demo.sh
