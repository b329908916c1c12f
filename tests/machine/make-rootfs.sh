#!/bin/sh
# Builds the Debian bookworm root filesystem the real-systemd tests boot under systemd-nspawn.
# Built once and cached outside the repository; a no-op when it already exists.
#   PODUNIT_TEST_ROOTFS  where it lives (default /var/cache/podunit-test/rootfs-bookworm)
#   PODUNIT_TEST_MIRROR  Debian mirror (default: the host's, from its apt sources)
#   V=1                  show debootstrap's output (else only its last lines, if it fails)
#   make-rootfs.sh --print-mirror   prints the mirror it would use, and exits
# The build goes to a temporary directory next to the target and is renamed at the end, so an
# interrupted build never leaves a half-made rootfs behind that later runs would trust.
set -eu

ROOTFS=${PODUNIT_TEST_ROOTFS:-/var/cache/podunit-test/rootfs-bookworm}
SUITE=bookworm
# What a podunit host has: systemd, D-Bus, and nss-systemd (numeric pod users live in /run/userdb);
# the CNI plugins and what they call (iptables for ipMasq, portmap and firewall), which the
# packages recommend for `network: cni`; dnsmasq, the tests' cluster DNS.
PACKAGES=systemd,systemd-sysv,dbus,libnss-systemd,containernetworking-plugins,iptables,iproute2,dnsmasq-base
# Bump when PACKAGES changes, so cached root filesystems of an older list are rebuilt.
STAMP=.podunit-rootfs-v4

# The first enabled `deb` source of the host's apt configuration (one-line and deb822 formats, at
# the places `apt-config` names, so APT_CONFIG is honoured) that serves $SUITE, else one that
# serves another Debian release: every Debian mirror carries them all. Security and update
# suites live elsewhere or only add to a release, so they never count.
host_mirror() {
    list=/etc/apt/sources.list
    parts=/etc/apt/sources.list.d
    if command -v apt-config >/dev/null; then
        eval "$(apt-config shell list Dir::Etc::sourcelist/f parts Dir::Etc::sourceparts/d)"
    fi
    {
        [ ! -f "$list" ] || awk '{ print "L", $0 }' "$list"
        for f in "$parts"/*.list; do [ ! -f "$f" ] || awk '{ print "L", $0 }' "$f"; done
        for f in "$parts"/*.sources; do
            [ ! -f "$f" ] || { awk '{ print "S", $0 }' "$f"; echo "S"; }
        done
    } | awk -v want="$SUITE" '
        function release(s) {
            return s ~ /^(buster|bullseye|bookworm|trixie|forky|duke|sid|oldoldstable|oldstable|stable|testing|unstable)$/
        }
        function consider(uri, suites,   n, i, a) {
            n = split(suites, a, /[ \t]+/)
            for (i = 1; i <= n; i++) {
                if (a[i] == want && exact == "") exact = uri
                if (release(a[i]) && other == "") other = uri
            }
        }
        function paragraph() {
            if (enabled && types ~ /(^|[ \t])deb([ \t]|$)/) {
                n = split(uris, u, /[ \t]+/)
                for (i = 1; i <= n; i++) if (u[i] != "") consider(u[i], suites)
            }
            types = ""; uris = ""; suites = ""; enabled = 1
        }
        BEGIN { enabled = 1 }
        $1 == "L" {
            sub(/^L /, ""); sub(/#.*/, "")
            if ($1 != "deb") next
            i = 2
            if ($2 ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
            consider($i, $(i + 1))
            next
        }
        $1 == "S" {
            sub(/^S ?/, "")
            if ($0 ~ /^[ \t]*$/) { paragraph(); next }
            if ($0 ~ /^#/) next
            if ($0 ~ /^[ \t]/) {
                # A continuation line: one more value of the field above.
                if (key == "uris") uris = uris " " $0
                else if (key == "suites") suites = suites " " $0
                else if (key == "types") types = types " " $0
                next
            }
            key = tolower($0); sub(/:.*/, "", key)
            val = $0; sub(/^[^:]*:[ \t]*/, "", val)
            if (key == "types") types = val
            else if (key == "uris") uris = val
            else if (key == "suites") suites = val
            else if (key == "enabled") enabled = (tolower(val) != "no")
        }
        END { paragraph(); if (exact != "") print exact; else if (other != "") print other }
    '
}

MIRROR=${PODUNIT_TEST_MIRROR:-$(host_mirror)}
if [ "${1:-}" = --print-mirror ]; then
    [ -n "$MIRROR" ] && echo "$MIRROR"
    exit $?
fi
if [ -e "$ROOTFS/$STAMP" ]; then
    exit 0
fi
if [ -z "$MIRROR" ]; then
    echo "make-rootfs: no Debian mirror among the host's apt sources; set PODUNIT_TEST_MIRROR" >&2
    exit 1
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
echo "make-rootfs: building $ROOTFS (debootstrap $SUITE from $MIRROR, about a minute)" >&2
# debootstrap says some 500 lines: only with V=1, or its last ones when it fails.
if [ "${V:-}" = 1 ]; then
    debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$tmp/rootfs" "$MIRROR" >&2
elif ! debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$tmp/rootfs" "$MIRROR" \
    >"$tmp/debootstrap.log" 2>&1; then
    tail -n 40 "$tmp/debootstrap.log" >&2
    echo "make-rootfs: debootstrap failed (its last lines above; V=1 shows all)" >&2
    exit 1
fi
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
