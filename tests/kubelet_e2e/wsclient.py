#!/usr/bin/env python3
"""A WebSocket client of its own (RFC 6455, standard library only), independent of the node's
code and of kubectl, for the kubelet API's WebSocket edge cases (tests/kubelet_e2e/websocket.rs).

Usage: wsclient.py CERT KEY URL [PROTOCOLS] [FRAME...]
  PROTOCOLS  the Sec-WebSocket-Protocol value ("-": no header)
  FRAME      OPCODE:HEX (a whole frame, masked), raw:HEX (bytes as they are), or pause:SECONDS
Sends the frames after the handshake, then reads until a close frame, EOF or 20 s, and prints
JSON: the status, the response headers, the messages [opcode, hex payload] and the close code.
"""
import json
import os
import socket
import ssl
import struct
import sys
import time
import urllib.parse

cert, key, url = sys.argv[1:4]
protocols = sys.argv[4] if len(sys.argv) > 4 else "-"
frames = sys.argv[5:]
u = urllib.parse.urlsplit(url)

ctx = ssl.create_default_context()
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
ctx.load_cert_chain(cert, key)
sock = ctx.wrap_socket(socket.create_connection((u.hostname, u.port), timeout=20))

wskey = "dGhlIHNhbXBsZSBub25jZQ=="
head = (f"GET {u.path}?{u.query} HTTP/1.1\r\nHost: {u.netloc}\r\nUpgrade: websocket\r\n"
        f"Connection: Upgrade\r\nSec-WebSocket-Key: {wskey}\r\nSec-WebSocket-Version: 13\r\n")
if protocols != "-":
    head += f"Sec-WebSocket-Protocol: {protocols}\r\n"
sock.sendall((head + "\r\n").encode())

buf = b""
while b"\r\n\r\n" not in buf:
    chunk = sock.recv(4096)
    if not chunk:
        break
    buf += chunk
raw_head, _, buf = buf.partition(b"\r\n\r\n")
lines = raw_head.decode().split("\r\n")
status = int(lines[0].split(" ")[1])
headers = {k.lower(): v.strip() for k, v in (l.split(":", 1) for l in lines[1:])}
out = {"status": status, "headers": headers, "messages": [], "close": None}
if status != 101:
    length = int(headers.get("content-length", "0"))
    while len(buf) < length:
        chunk = sock.recv(4096)
        if not chunk:
            break
        buf += chunk
    out["body"] = buf.decode(errors="replace")
    print(json.dumps(out))
    sys.exit(0)


def masked(opcode, payload):
    mask = os.urandom(4)
    n = len(payload)
    if n < 126:
        h = struct.pack("!BB", 0x80 | opcode, 0x80 | n)
    elif n < 65536:
        h = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, n)
    else:
        h = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, n)
    return h + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


for f in frames:
    kind, _, arg = f.partition(":")
    if kind == "pause":
        time.sleep(float(arg))
    elif kind == "raw":
        sock.sendall(bytes.fromhex(arg))
    else:
        sock.sendall(masked(int(kind), bytes.fromhex(arg)))


def need(n):
    global buf
    while len(buf) < n:
        chunk = sock.recv(65536)
        if not chunk:
            raise EOFError
        buf += chunk


deadline = time.time() + 20
try:
    while time.time() < deadline:
        need(2)
        b0, b1 = buf[0], buf[1]
        assert b1 & 0x80 == 0, "a server frame is masked"
        n, at = b1 & 0x7F, 2
        if n == 126:
            need(4)
            n, at = struct.unpack("!H", buf[2:4])[0], 4
        elif n == 127:
            need(10)
            n, at = struct.unpack("!Q", buf[2:10])[0], 10
        need(at + n)
        payload, buf = buf[at:at + n], buf[at + n:]
        opcode = b0 & 0x0F
        if opcode == 8:
            out["close"] = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else 0
            # Answer it, as a client does.
            sock.sendall(masked(8, payload[:2]))
            break
        out["messages"].append([opcode, payload.hex()])
except (EOFError, socket.timeout, ssl.SSLError, ConnectionError) as e:
    out["error"] = type(e).__name__
print(json.dumps(out))
