#!/bin/sh
# `make demo`: boots a throwaway systemd machine (systemd-nspawn; the host needs no systemd), installs
# the release build of podunit in it as the package does (binaries, units, the node configuration),
# drops examples/*.yaml into /etc/pods.d, reloads, and shows `podunit status` and a pod's logs.
# Everything is removed at the end.
#   PODUNIT_TEST_ROOTFS  the cached Debian rootfs (built by tests/machine/make-rootfs.sh)
#   PODUNIT_DEMO_KEEP=1  leave the machine running and print how to enter it; its copy of the
#                        rootfs is removed when the machine stops
set -eu

repo=$(cd "$(dirname "$0")/../.." && pwd)
rootfs=${PODUNIT_TEST_ROOTFS:-/var/cache/podunit-test/rootfs-bookworm}
bin=${CARGO_TARGET_DIR:-$repo/target}/release
[ "$(id -u)" = 0 ] || { echo "demo: run as root (it boots a systemd-nspawn machine)" >&2; exit 1; }
command -v systemd-nspawn >/dev/null || { echo "demo: install systemd-container" >&2; exit 1; }
"$repo/tests/machine/make-rootfs.sh"
for b in podunit podunit-sync podunit-generator; do
    [ -x "$bin/$b" ] || { echo "demo: $bin/$b missing: run make demo" >&2; exit 1; }
done

work=$(mktemp -d /var/tmp/podunit-demo.XXXXXX)
root=$work/root
nspawn=
leader=
cleanup() {
    set +e
    if [ -n "${PODUNIT_DEMO_KEEP:-}" ] && [ -n "$leader" ]; then
        # Whoever stops the machine (kill, poweroff inside) also frees its root copy (~250 MB).
        setsid sh -c 'while kill -0 "$1" 2>/dev/null; do sleep 1; done; rm -rf "$2"' \
            demo-reaper "$nspawn" "$work" </dev/null >/dev/null 2>&1 &
        echo "demo: left running; enter with: nsenter -t $leader -a bash"
        echo "demo: stop it with: kill $nspawn   (its copy in $work is removed then)"
        return
    fi
    [ -n "$leader" ] && kill -KILL "$leader" 2>/dev/null
    [ -n "$nspawn" ] && wait "$nspawn" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say() { printf '\n\033[1m%s\033[0m\n' "$*"; }

say "Installing podunit into a copy of $rootfs"
cp -a --reflink=auto "$rootfs" "$root"
install -m 0755 "$bin/podunit" "$bin/podunit-sync" "$root/usr/bin/"
install -D -m 0755 "$bin/podunit-generator" "$root/usr/lib/systemd/system-generators/podunit-generator"
units=
for f in "$repo"/packaging/systemd/*; do
    [ -f "$f" ] || continue
    case $f in
        *.service|*.target|*.slice) install -m 0644 "$f" "$root/usr/lib/systemd/system/"
            grep -q '^\[Install\]' "$f" && units="$units $(basename "$f")" ;;
        *.preset) install -D -m 0644 "$f" "$root/usr/lib/systemd/system-preset/$(basename "$f")" ;;
    esac
done
for f in "$repo"/packaging/tmpfiles.d/*.conf; do
    [ -f "$f" ] && install -D -m 0644 "$f" "$root/usr/lib/tmpfiles.d/$(basename "$f")"
done
if [ ! -e "$root/usr/lib/systemd/system/podunit.target" ]; then
    printf '[Unit]\nDescription=Kubernetes Pods\n\n[Install]\nWantedBy=multi-user.target\n' \
        > "$root/usr/lib/systemd/system/podunit.target"
    units="$units podunit.target"
fi
[ -n "$units" ] && systemctl --root="$root" enable $units >/dev/null 2>&1
mkdir -p "$root/etc/pods.d"
# The node configuration as the package ships it (every key documented, all commented out), so a
# change to try (registries, policy, network) starts from the real file.
install -D -m 0644 "$repo/packaging/config.yaml" "$root/etc/podunit/config.yaml"

say "Booting it: systemd-nspawn --boot"
systemd-nspawn -q -D "$root" --boot --register=no --keep-unit --machine=podunit-demo \
    --private-network --console=read-only >"$work/console.log" 2>&1 </dev/null &
nspawn=$!
i=0
while leader=$(pgrep -P "$nspawn" -x systemd); [ -z "$leader" ]; do
    i=$((i + 1))
    [ $i -lt 600 ] && kill -0 "$nspawn" 2>/dev/null || { cat "$work/console.log" >&2; exit 1; }
    sleep 0.1
done
inside() { nsenter -t "$leader" -a env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 TERM="${TERM:-dumb}" "$@"; }
until state=$(inside systemctl is-system-running --wait 2>/dev/null) || [ -n "$state" ]; do sleep 0.2; done
echo "system: $state"

say "# cp examples/*.yaml /etc/pods.d/ && systemctl daemon-reload"
cp "$repo"/examples/*.yaml "$root/etc/pods.d/"
inside systemctl daemon-reload
sleep 8

rc=0
say "# podunit status"
inside podunit status || rc=$?
say "# podunit status hello"
inside podunit status hello || rc=$?
say "# podunit logs shared-volume -c reader"
inside podunit logs shared-volume -c reader || rc=$?
say "# podunit logs greeter"
inside podunit logs greeter || rc=$?
say "# systemctl list-units 'podunit*'"
inside systemctl --no-pager list-units --all 'podunit*' || rc=$?
exit $rc
