#!/bin/sh
# `make install` / `make uninstall`: installs exactly the files of packaging/files.tsv that are meant
# for a source install, so the packages and a source install never drift apart.
#   packaging/install.sh install|uninstall|list   (from the source tree; DESTDIR, PREFIX from the env)
# Files under /usr move under PREFIX (and the units' /usr/bin paths with them); /etc stays /etc.
# Config files are never overwritten and never removed (like a conffile).
set -eu

action=${1:?usage: install.sh install|uninstall|list}
DESTDIR=${DESTDIR:-}
PREFIX=${PREFIX:-/usr}
manifest=$(dirname "$0")/files.tsv

# Prints "path mode source flags" for each entry a source install gets, path already moved to PREFIX.
entries() {
    grep -v '^#' "$manifest" | grep -v '^[[:space:]]*$' | while IFS='	' read -r path mode src flags; do
        case ",$flags," in
            *,generated,*) continue ;;
            *,install,*) ;;
            *,deb,* | *,rpm,*) continue ;;
        esac
        case "$path" in
            /usr/*) path="$PREFIX${path#/usr}" ;;
        esac
        printf '%s\t%s\t%s\t%s\n' "$path" "$mode" "$src" "$flags"
    done
}

case "$action" in
list)
    entries
    ;;
install)
    entries | while IFS='	' read -r path mode src flags; do
        dest="$DESTDIR$path"
        case ",$flags," in
            *,dir,*)
                install -d -m "$mode" "$dest"
                continue
                ;;
        esac
        [ -f "$src" ] || { echo "install.sh: missing $src (run make stage first)" >&2; exit 1; }
        case ",$flags," in
            *,conf,*)
                if [ -e "$dest" ]; then
                    echo "keeping existing $dest" >&2
                    continue
                fi
                ;;
        esac
        install -d -m 0755 "$(dirname "$dest")"
        case "$path" in
            */systemd/system/*.service)
                # ExecStart= names the binaries where this install puts them.
                sed "s|/usr/bin/|$PREFIX/bin/|g" "$src" >"$dest.tmp"
                chmod "$mode" "$dest.tmp"
                mv "$dest.tmp" "$dest"
                ;;
            *)
                install -m "$mode" "$src" "$dest"
                ;;
        esac
    done
    ;;
uninstall)
    entries | while IFS='	' read -r path mode src flags; do
        dest="$DESTDIR$path"
        case ",$flags," in
            *,conf,*) continue ;;
            *,dir,*) rmdir "$dest" 2>/dev/null || true ;;
            *) rm -f "$dest" ;;
        esac
    done
    # Directories only podunit uses, if empty now.
    for d in "$PREFIX/share/doc/podunit/examples" "$PREFIX/share/doc/podunit" \
        "$PREFIX/share/licenses/podunit"; do
        rmdir "$DESTDIR$d" 2>/dev/null || true
    done
    ;;
*)
    echo "usage: install.sh install|uninstall|list" >&2
    exit 2
    ;;
esac
