#!/usr/bin/env python3
"""Seed layers for the `unpack` fuzz target: small tar streams with every kind of entry an image
layer holds, the OCI whiteouts, and the escapes the unpacker must refuse. From an empty corpus
libFuzzer rarely builds a valid tar header (a checksum guards each one), so these are where
mutation starts. Layers reach the unpacker decompressed, so the seeds are plain tar.
Usage: unpack.py DIR (writes DIR/seed-*.tar)."""
import io
import sys
import tarfile
from pathlib import Path


def entry(name, kind=tarfile.REGTYPE, data=b"", link="", mode=0o644, uid=0, gid=0, pax=None,
          dev=(0, 0)):
    t = tarfile.TarInfo(name)
    t.type, t.linkname, t.mode, t.uid, t.gid = kind, link, mode, uid, gid
    t.size = len(data) if kind == tarfile.REGTYPE else 0
    t.devmajor, t.devminor = dev
    t.mtime = 1700000000
    if pax:
        t.pax_headers = pax
    return t, data


def layer(entries, fmt=tarfile.PAX_FORMAT):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tar:
        for t, data in entries:
            tar.addfile(t, io.BytesIO(data) if t.type == tarfile.REGTYPE else None)
    return buf.getvalue()


D, S, H = tarfile.DIRTYPE, tarfile.SYMTYPE, tarfile.LNKTYPE
SEEDS = {
    "kinds": [
        entry("./", D, mode=0o755),
        entry("etc/", D, mode=0o755),
        entry("etc/passwd", data=b"root:x:0:0::/root:/bin/sh\napp:x:1000:1000::/home/app:/bin/sh\n"),
        entry("bin/su", data=b"\x7fELF", mode=0o4755),
        entry("bin/sh", S, link="busybox", mode=0o777),
        entry("etc/passwd-", H, link="etc/passwd"),
        entry("dev/null", tarfile.CHRTYPE, mode=0o666, dev=(1, 3)),
        entry("dev/loop0", tarfile.BLKTYPE, mode=0o660, dev=(7, 0)),
        entry("run/fifo", tarfile.FIFOTYPE, mode=0o600),
        entry("home/app/", D, mode=0o700, uid=1000, gid=1000),
        entry("bin/ping", data=b"\x7fELF", mode=0o755,
              pax={"SCHILY.xattr.security.capability": "\x01\x00\x00\x02\x00\x20\x00\x00",
                   "SCHILY.xattr.user.note": "hi"}),
    ],
    "whiteouts": [
        entry("usr/", D, mode=0o755),
        entry("usr/.wh..wh..opq"),
        entry("usr/share/", D, mode=0o755),
        entry("etc/.wh.motd"),
        entry("var/lib/.wh.apt", mode=0o600),
        entry(".wh..wh.plnk/1"),
    ],
    "escapes": [
        entry("../outside", data=b"x"),
        entry("/etc/absolute", data=b"x"),
        entry("a/../../up", data=b"x"),
        entry("up", S, link="../"),
        entry("up/through", data=b"x"),
        entry("abs", S, link="/"),
        entry("abs/through", data=b"x"),
        entry("hard", H, link="../sibling/canary"),
        entry(".wh...", data=b""),
    ],
    "replace": [
        entry("x/", D, mode=0o755),
        entry("x/file", data=b"one"),
        entry("x", S, link="/tmp"),
        entry("x/file", data=b"two"),
        entry("y", data=b"file"),
        entry("y/", D, mode=0o755),
    ],
    "longnames": [
        entry("d/" + "n" * 200 + "/", D, mode=0o755),
        entry("d/" + "n" * 200 + "/" + "f" * 150, data=b"long"),
        entry("l", S, link="t" * 300),
    ],
}


def main():
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    for name, entries in SEEDS.items():
        (out / f"seed-{name}.tar").write_bytes(layer(entries))
    gnu = layer(SEEDS["longnames"], tarfile.GNU_FORMAT)
    (out / "seed-longnames-gnu.tar").write_bytes(gnu)


main()
