# podunit — developer entry points. `make test` is what CI runs.
CARGO ?= cargo
PREFIX ?= /usr
DESTDIR ?=

.PHONY: all build release test lint fmt bench demo deb rpm install uninstall fuzz fake-apiserver

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
test: lint
	$(CARGO) test --workspace

# The test double of the Kubernetes API server, as a binary for end-to-end tests and benchmarks.
fake-apiserver:
	$(CARGO) build -p fake-apiserver
