# podunit — developer entry points. `make test` is what CI runs.
CARGO ?= cargo
PREFIX ?= /usr
DESTDIR ?=

.PHONY: all build release test lint fmt bench demo deb rpm install uninstall fuzz

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

# Fuzzing, separate from `make test`: runs every target under fuzz/ for FUZZ_TIME seconds each.
# cargo-fuzz needs a nightly toolchain (sanitizers); without one, use the stable toolchain with
# `RUSTC_BOOTSTRAP=1 make fuzz FUZZ_TOOLCHAIN=` (RUSTC_BOOTSTRAP unlocks nightly flags on stable).
FUZZ_TIME ?= 60
FUZZ_TOOLCHAIN ?= +nightly
fuzz:
	command -v cargo-fuzz >/dev/null || $(CARGO) install cargo-fuzz --locked
	set -e; for t in $$($(CARGO) $(FUZZ_TOOLCHAIN) fuzz list); do \
	  $(CARGO) $(FUZZ_TOOLCHAIN) fuzz run $$t -- -max_total_time=$(FUZZ_TIME); \
	done
