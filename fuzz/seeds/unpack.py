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


def raw_header(name, kind, size, magic=b"ustar\x0000"):
    """A header whose size field says `size`, whatever follows (tarfile would write the data)."""
    h = bytearray(512)
    h[0:len(name)] = name.encode()
    h[100:108] = b"0000644\x00"
    h[108:116] = h[116:124] = b"0000000\x00"
    if size < 8 ** 11:
        h[124:136] = b"%011o\x00" % size
    else:  # base-256, as GNU tar writes sizes of 8 GiB and more
        h[124:136] = b"\x80" + size.to_bytes(11, "big")
    h[136:148] = b"00000000000\x00"
    h[156] = ord(kind)
    h[257:265] = magic
    h[148:156] = b" " * 8
    h[148:156] = b"%06o\x00 " % sum(h)
    return bytes(h)


END = bytes(1024)
# The bounds the unpacker keeps before the tar parser buffers anything (src/image/unpack/bounds.rs).
HOSTILE = {
    # A GNU long name that says 64 MiB: refused at its header, never read into memory.
    "longname-huge": raw_header("././@LongLink", "L", 64 << 20) + b"a" * 4096,
    # PAX records that say 2 MiB.
    "pax-huge": raw_header("PaxHeader", "x", 2 << 20) + b"9 a=b\n" * 100,
    # A PAX size that makes the next entry's content hide an L header: the parser and the
    # bounds must agree on where the next header is.
    "pax-size": raw_header("PaxHeader", "x", 13) + b"13 size=1024\n".ljust(512, b"\0")
    + raw_header("f", "0", 0) + raw_header("hidden", "L", 64 << 20) + bytes(512)
    + raw_header("real", "L", 64 << 20) + END,
    # A regular file that says 8 GiB (a bomb's shape without its bytes).
    "bomb": raw_header("zeros", "0", 8 << 30) + bytes(4096),
    # Data after the end marker.
    "trailer": layer([entry("f", data=b"f")]) + bytes(64 << 10),
    # (uid_t) -1, which chown takes as "leave it".
    "noid": layer([entry("f", data=b"f", pax={"uid": "4294967295"})]),
}


def main():
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    for name, entries in SEEDS.items():
        (out / f"seed-{name}.tar").write_bytes(layer(entries))
    gnu = layer(SEEDS["longnames"], tarfile.GNU_FORMAT)
    (out / "seed-longnames-gnu.tar").write_bytes(gnu)
    for name, data in HOSTILE.items():
        (out / f"seed-{name}.tar").write_bytes(data)


main()
