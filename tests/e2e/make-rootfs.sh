#!/bin/sh
# Builds the Debian bookworm root filesystem the real-systemd tests boot under systemd-nspawn.
# Built once and cached outside the repository; a no-op when it already exists.
#   PODUNIT_TEST_ROOTFS  where it lives (default /var/cache/podunit-test/rootfs-bookworm)
#   PODUNIT_TEST_MIRROR  Debian mirror (default http://deb.debian.org/debian)
# The build goes to a temporary directory next to the target and is renamed at the end, so an
# interrupted build never leaves a half-made rootfs behind that later runs would trust.
set -eu

ROOTFS=${PODUNIT_TEST_ROOTFS:-/var/cache/podunit-test/rootfs-bookworm}
MIRROR=${PODUNIT_TEST_MIRROR:-http://deb.debian.org/debian}
# What a podunit host has: systemd, D-Bus, and nss-systemd (numeric pod users live in /run/userdb).
PACKAGES=systemd,systemd-sysv,dbus,libnss-systemd
# Bump when PACKAGES changes, so cached root filesystems of an older list are rebuilt.
STAMP=.podunit-rootfs-v2

if [ -e "$ROOTFS/$STAMP" ]; then
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "make-rootfs: must run as root to build $ROOTFS" >&2
    exit 1
fi
command -v debootstrap >/dev/null || { echo "make-rootfs: debootstrap is not installed" >&2; exit 1; }

parent=$(dirname "$ROOTFS")
mkdir -p "$parent"
# A lock so that concurrent test binaries and `make` do not build it twice.
exec 9>"$parent/.make-rootfs.lock"
if command -v flock >/dev/null; then flock 9; fi
if [ -e "$ROOTFS/$STAMP" ]; then
    exit 0
fi

tmp=$(mktemp -d "$parent/.rootfs-build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "make-rootfs: building $ROOTFS (debootstrap bookworm, about a minute)" >&2
debootstrap --variant=minbase --include="$PACKAGES" bookworm "$tmp/rootfs" "$MIRROR" >&2
grep -q '^passwd:.*systemd' "$tmp/rootfs/etc/nsswitch.conf" || {
    echo "make-rootfs: nss-systemd is not enabled in nsswitch.conf" >&2
    exit 1
}
touch "$tmp/rootfs/$STAMP"
# An outdated rootfs is replaced whole.
if [ -e "$ROOTFS" ]; then
    mv "$ROOTFS" "$tmp/old"
fi
mv "$tmp/rootfs" "$ROOTFS"
echo "make-rootfs: done: $ROOTFS" >&2
