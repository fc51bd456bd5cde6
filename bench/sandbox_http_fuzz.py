"""Fuzzes the HTTP API of `k3lab sandbox serve` (docs/sandbox.md) on loopback: requests built from
the API's own and mutated (methods, paths, headers, bodies, lengths that lie, truncated or huge),
one connection each, from a fixed seed. Every answer must be well-formed HTTP, an error must carry
a JSON body {"error": "one line"}, client garbage must never get a 5xx, no request may go
unanswered, and /v1/health must answer with the token between requests. Standard library only.

    python3 bench/sandbox_http_fuzz.py URL TOKEN --seconds 5 [--requests N] [--seed S]
"""
import argparse
import json
import random
import re
import socket
import sys
import time

PATHS = ["/v1/health", "/v1/images", "/v1/sandboxes", "/v1/run", "/v1/sandboxes/{id}",
         "/v1/sandboxes/{id}/exec", "/v1/sandboxes/{id}/files?path=/work/a",
         "/v1/sandboxes/{id}/snapshot", "/", "/v1", "/v1/sandboxes/", "/v1//health"]
METHODS = ["GET", "POST", "PUT", "DELETE", "HEAD", "PATCH", "OPTIONS", "TRACE", "CONNECT",
           "PRI", "get", "FOO", ""]
BODIES = [{"argv": ["true"]}, {"image": "host", "argv": ["echo", "hi"], "timeout_s": 1},
          {"image": "no\nsuch"}, {"limits": {"memory_mb": 64}}, {"argv": []}, {"name": "x"},
          {"argv": ["sh", "-c", "exit 3"], "stdin": "a" * 100}, [], "text", None, 1e308]


def mutate_text(rng, text):
    ops = [lambda t: t[:rng.randrange(len(t) + 1)],
           lambda t: t + rng.choice(["%00", "%", "\x00", "\x7f", "\xff", "..", "/" * 50, "é"]),
           lambda t: t.replace("/", rng.choice(["//", "%2f", "\\"]), 1),
           lambda t: t * rng.randrange(1, 50),
           lambda t: "".join(chr(rng.randrange(256)) for _ in range(rng.randrange(40)))]
    return rng.choice(ops)(text) if text else text


def build(rng, token, sandbox_id):
    method = rng.choice(METHODS)
    path = rng.choice(PATHS).replace("{id}", sandbox_id or "ns-none")
    if rng.random() < 0.3:
        path = mutate_text(rng, path)
    body_value = rng.choice(BODIES)
    body = json.dumps(body_value).encode() if rng.random() < 0.7 else bytes(
        rng.randrange(256) for _ in range(rng.randrange(200)))
    if rng.random() < 0.2:
        body = body[:rng.randrange(len(body) + 1)]
    headers = []
    auth = rng.random()
    if auth < 0.6:
        headers.append(f"Authorization: Bearer {token}")
    elif auth < 0.8:
        headers.append(rng.choice([f"Authorization: Bearer {token} ", "Authorization: Bearer x",
                                   f"Authorization: {token}", f"Authorization: Bearer {token[:-1]}"]))
    length = rng.random()
    if length < 0.6:
        headers.append(f"Content-Length: {len(body)}")
    elif length < 0.8:
        headers.append("Content-Length: " + rng.choice(
            [str(len(body) + rng.randrange(1, 100)), str(max(0, len(body) - 1)), "-1", "abc",
             "99999999999999999999", str(1 << 40), "1, 2"]))
    elif length < 0.9:
        headers.append("Transfer-Encoding: chunked")
    for _ in range(rng.choice([0, 0, 1, 3, 150])):
        headers.append(rng.choice(["X-A: b", "Range: bytes=0-3", "Expect: 100-continue",
                                   "Connection: close", "Content-Type: application/json",
                                   "X-Long: " + "l" * rng.choice([10, 9000, 70000]), "NoColon",
                                   "Host: " + mutate_text(rng, "127.0.0.1")]))
    version = rng.choice(["HTTP/1.1"] * 8 + ["HTTP/1.0", "HTTP/2", "HTTX", ""])
    head = f"{method} {path} {version}\r\n" + "".join(h + "\r\n" for h in headers) + "\r\n"
    if rng.random() < 0.1:
        head = mutate_text(rng, head)
    return method, head.encode("latin-1", "replace") + body


def exchange(host, port, data, head_only, timeout=30):
    """Sends DATA on a new connection, half-closes it, returns (status, body) of the first
    response proper (1xx skipped), or None when the server closed without one."""
    with socket.create_connection((host, port), timeout=timeout) as s:
        try:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # refused midway; the answer may still be there
        got = b""
        while True:
            m = re.match(rb"HTTP/1\.1 1\d\d [^\r\n]*\r\n\r\n", got)
            if m:
                got = got[m.end():]
                continue
            head, sep, body = got.partition(b"\r\n\r\n")
            length = re.search(rb"(?i)\r\ncontent-length: *(\d+)", head)
            if sep and (head_only or (length and len(body) >= int(length.group(1)))):
                break
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                break
            got += chunk
    if not got:
        return None
    head, sep, body = got.partition(b"\r\n\r\n")
    status = re.match(rb"HTTP/1\.1 (\d{3}) [^\r\n]*(\r\n[^\r\n]+)*$", head)
    if not sep or not status:
        raise AssertionError(f"malformed response {got[:300]!r}")
    return int(status.group(1)), body


def main():
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("token")
    p.add_argument("--seconds", type=float, default=5)
    p.add_argument("--requests", type=int, default=1 << 30)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    host, port = a.url[len("http://"):].split(":")
    port = int(port)
    rng = random.Random(a.seed)
    health = f"GET /v1/health HTTP/1.1\r\nAuthorization: Bearer {a.token}\r\n\r\n".encode()
    sandbox_id, sent, statuses = None, 0, {}
    end = time.monotonic() + a.seconds
    while sent < a.requests and time.monotonic() < end:
        method, data = build(rng, a.token, sandbox_id)
        reply = exchange(host, port, data, method == "HEAD")
        sent += 1
        if reply is None:
            # Only a request whose line and headers never ended may go unanswered.
            assert b"\r\n\r\n" not in data, f"no answer to {data[:300]!r}"
            continue
        status, body = reply
        statuses[status] = statuses.get(status, 0) + 1
        assert status < 500, f"{status} for client input {data[:300]!r}: {body[:300]!r}"
        if status >= 400 and method != "HEAD":
            message = json.loads(body)["error"]
            assert isinstance(message, str) and message and "\n" not in message, body
        if status == 201 and b'"id"' in body:
            sandbox_id = json.loads(body)["id"]
        if sent % 20 == 0:
            assert exchange(host, port, health, False)[0] == 200, "/v1/health stopped answering"
    assert exchange(host, port, health, False)[0] == 200, "/v1/health stopped answering"
    print(f"fuzz: {sent} requests, seed {a.seed}, statuses {dict(sorted(statuses.items()))}")


if __name__ == "__main__":
    try:
        main()
    except AssertionError as e:
        sys.exit(f"fuzz: FAILED: {e}")
