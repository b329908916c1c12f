#!/usr/bin/env python3
"""Seed connections for the `spdy_frames` and `ws_frames` fuzz targets: the frames a client sends
on an upgraded exec, attach or port-forward connection, written from the protocols' own layouts
(SPDY/3.1: draft-mbelshe-httpbis-spdy-00 §2.2, with header blocks compressed through one zlib
stream from the SPDY/3 dictionary, as a connection's are; WebSocket: RFC 6455 §5.2, masked as a
client's frames are). From an empty corpus libFuzzer rarely builds a header block that inflates
or a frame that parses, so these are where mutation starts.
Usage: frames.py DIR (writes DIR/spdy_frames/seed-* and DIR/ws_frames/seed-*)."""
import struct
import sys
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
DICTIONARY = (ROOT / "src/kubelet/spdy/dictionary.bin").read_bytes()


def control(kind, flags, payload):
    return struct.pack("!HHI", 0x8000 | 3, kind, (flags << 24) | len(payload)) + payload


def data(stream, fin, payload):
    return struct.pack("!II", stream, ((1 if fin else 0) << 24) | len(payload)) + payload


def pairs(headers):
    out = struct.pack("!I", len(headers))
    for n, v in headers:
        out += struct.pack("!I", len(n)) + n.encode() + struct.pack("!I", len(v)) + v.encode()
    return out


class Deflate:
    """One zlib stream per connection, sync-flushed after each block."""

    def __init__(self):
        self.z = zlib.compressobj(zdict=DICTIONARY)

    def block(self, headers):
        return self.z.compress(pairs(headers)) + self.z.flush(zlib.Z_SYNC_FLUSH)


def syn_stream(z, stream, headers, fin=False):
    return control(1, 1 if fin else 0, struct.pack("!IIBB", stream, 0, 0, 0) + z.block(headers))


def exec_session():
    z = Deflate()
    out = b""
    for i, kind in enumerate(["error", "stdin", "stdout", "stderr", "resize"]):
        out += syn_stream(z, 2 * i + 1, [("streamtype", kind)])
    out += data(3, False, b"echo hi\n") + data(3, True, b"")
    out += data(9, False, b'{"Width":80,"Height":24}')
    out += control(6, 0, struct.pack("!I", 1))  # PING
    out += control(3, 0, struct.pack("!II", 5, 5))  # RST_STREAM
    out += control(4, 0, struct.pack("!III", 1, 0x01000007, 65536))  # SETTINGS
    out += control(9, 0, struct.pack("!II", 3, 4096))  # WINDOW_UPDATE
    out += control(8, 0, struct.pack("!I", 3) + z.block([("x", "y")]))  # HEADERS
    out += control(2, 0, struct.pack("!I", 3) + z.block([]))  # SYN_REPLY
    out += control(7, 0, struct.pack("!II", 9, 0))  # GOAWAY
    return out


def port_forward_session():
    z = Deflate()
    out = b""
    for rid, port in [("0", "8080"), ("1", "9090"), ("1", "9090")]:
        for j, kind in enumerate(["error", "data"]):
            sid = 1 + 2 * (2 * int(rid) + j)
            out += syn_stream(z, sid, [("streamtype", kind), ("port", port),
                                       ("requestid", rid)])
    out += data(3, False, b"GET / HTTP/1.0\r\n\r\n") + data(3, True, b"")
    out += syn_stream(z, 99, [("streamtype", "data"), ("port", "0"), ("requestid", "x")])
    return out


def spdy_seeds():
    z = Deflate()
    many = [("streamtype", "stdout"), ("port", "1" * 200)] + [(f"h{i}", "v" * i) for i in range(40)]
    return {
        "exec": exec_session(),
        "port-forward": port_forward_session(),
        "many-headers": syn_stream(z, 1, many),
        "fin-and-data": syn_stream(Deflate(), 1, [("streamtype", "error")], fin=True)
        + data(1, True, b"x" * 300),
        "unknown-control": control(10, 0, b"abcd") + control(6, 0, struct.pack("!I", 2)),
    }


def ws(opcode, payload, fin=True, mask=b"\x37\xfa\x21\x3d"):
    n = len(payload)
    b0 = (0x80 if fin else 0) | opcode
    if n < 126:
        head = struct.pack("!BB", b0, 0x80 | n)
    elif n < 65536:
        head = struct.pack("!BBH", b0, 0x80 | 126, n)
    else:
        head = struct.pack("!BBQ", b0, 0x80 | 127, n)
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def ws_seeds():
    return {
        "v5-exec": ws(2, b"\x00echo hi\n") + ws(2, b'\x04{"Width":80,"Height":24}')
        + ws(9, b"ping") + ws(2, b"\xff\x00") + ws(8, struct.pack("!H", 1000)),
        "base64": ws(1, b"0ZWNobyBoaQo=") + ws(1, b"4eyJXaWR0aCI6MTB9") + ws(1, b"0"),
        "fragments": ws(2, b"\x00ab", fin=False) + ws(9, b"") + ws(0, b"cd", fin=False)
        + ws(0, b"e") + ws(10, b""),
        "port-forward": ws(2, b"\x00GET / HTTP/1.0\r\n\r\n") + ws(2, b"\x02" + b"z" * 200)
        + ws(2, b"\x01ignored"),
        "lengths": ws(2, b"\x01" * 125) + ws(2, b"\x01" * 126) + ws(2, b"\x01" * 70000),
        "close-reason": ws(8, struct.pack("!H", 1001) + b"going away") + ws(8, b""),
    }


def main():
    root = Path(sys.argv[1])
    for target, seeds in [("spdy_frames", spdy_seeds()), ("ws_frames", ws_seeds())]:
        d = root / target
        d.mkdir(parents=True, exist_ok=True)
        for name, blob in seeds.items():
            (d / f"seed-{name}").write_bytes(blob)


main()
