#!/bin/sh
# Installs what `make test` or `make demo` needs on this machine, saying what it installs and why,
# and skipping what is already there (a second run is a no-op apart from its checks).
#   tests/setup.sh test   everything the test suites need (what CI runs first)
#   tests/setup.sh demo   only what `make demo` needs
# Needs root for what is missing (apt-get, /var/cache/podunit-test); without root it lists what is
# missing and how to install it, and fails.
set -eu
cd "$(dirname "$0")/.."

what=${1:-test}
case $what in
    test|demo) ;;
    *) echo "setup: usage: tests/setup.sh test|demo" >&2; exit 2 ;;
esac

say() { echo "setup: $*"; }

# Debian packages, each with the reason it is needed.
packages() {
    # Both: the real-systemd machines and the root filesystem they boot.
    echo "systemd systemd runs inside the test machines and is the reference for unit files"
    echo "systemd-container systemd-nspawn boots the test machines"
    echo "debootstrap builds the Debian root filesystem the machines boot"
    [ "$what" = test ] || return 0
    echo "lintian checks the built .deb"
    echo "rpm checks the built .rpm"
    echo "dpkg-dev dpkg-shlibdeps, for the .deb's dependencies"
    echo "docker-registry the real OCI registry of the image tests"
    echo "apache2-utils htpasswd -B, for the registry's password file"
    echo "openssl test certificates (registry, API server, token service)"
    echo "busybox-static the test images' contents"
    echo "skopeo the image benchmark's baseline"
    echo "python3-grpcio a real gRPC health server for the grpc probe tests"
    echo "python3 the fuzz seed scripts and the kubelet API's WebSocket test client"
    echo "iproute2 ip, to give a test machine an address inside its own network namespace, and the CNI tests' namespaces"
    echo "containernetworking-plugins the real CNI plugins (bridge, host-local, loopback, portmap, firewall) of the CNI tests"
    echo "iptables what the portmap and firewall CNI plugins run"
}

missing=
reasons=
while read -r p why; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $p"
        reasons="$reasons
  $p: $why"
    fi
done <<EOF
$(packages)
EOF

if [ -n "$missing" ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "setup: missing Debian packages (run as root, or: apt-get install$missing):$reasons" >&2
        exit 1
    fi
    say "installing Debian packages:$reasons"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq $missing
fi

if [ "$what" = test ]; then
    export PATH="$HOME/.cargo/bin:$PATH"
    for c in rustfmt clippy; do
        if ! rustup component list --installed 2>/dev/null | grep -q "^$c"; then
            say "installing the Rust component $c (make lint)"
            rustup component add "$c"
        fi
    done
    # The package builders (`make deb`, `make rpm`), pinned; built once per machine.
    if ! command -v cargo-deb >/dev/null; then
        say "installing cargo-deb 3.8.0 (make deb)"
        cargo install --locked cargo-deb --version 3.8.0
    fi
    if ! command -v cargo-generate-rpm >/dev/null; then
        say "installing cargo-generate-rpm 0.21.1 (make rpm)"
        cargo install --locked cargo-generate-rpm --version 0.21.1
    fi
fi

# The Debian root filesystem the machines boot (cached; about a minute the first time).
V="${V:-}" tests/machine/make-rootfs.sh
if [ "$what" = test ]; then
    # etcd and kube-apiserver built from Debian's kubernetes source (cached; 10 minutes or more
    # the first time). The script says what it installs.
    tests/controlplane/install.sh
fi
