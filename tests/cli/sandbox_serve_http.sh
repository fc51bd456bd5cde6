#!/usr/bin/env bash
# `k3lab sandbox serve` at the HTTP level, as an attacker and a careless client use it: the token
# file 0600 and written without following a planted symlink; bodies and headers bounded before
# the token is checked, and without the service's memory growing by their size; dozens of slow
# clients that do not stop it; the token compared exactly; a JSON error body for every status,
# unknown routes and methods included, only after the token; names with control characters
# escaped; a damaged store manifest a 500 that names it; a port out of range refused.
source "$(dirname "$0")/common.sh"
export K3LAB_SANDBOX_STORE=$(mktemp -d /tmp/k3sbx-http.XXXXXX)
chmod 755 "$K3LAB_SANDBOX_STORE"
mkdir -p "$WORK/root/bin" && echo hi > "$WORK/root/bin/file"
"$K3LAB" sandbox import damaged "$WORK/root" > /dev/null
echo precious > "$WORK/victim"
# The token is written through TOKEN.tmp.<pid>; the subshell's pid is the service's after exec,
# so a symlink to a victim file is planted at that very name first.
(
  ln -s "$WORK/victim" "$WORK/token.tmp.$BASHPID"
  exec "$K3LAB" sandbox serve --warm 0 --timeout 5 --token-file "$WORK/token"
) > "$WORK/serve.log" 2>&1 &
server=$!
trap 'stop_service $server "$K3LAB_SANDBOX_STORE"' EXIT
for _ in $(seq 100); do grep -q "service on" "$WORK/serve.log" && break; sleep 0.1; done
url=$(grep -o 'http://[0-9.:]*' "$WORK/serve.log") || fail "the service did not start: $(cat "$WORK/serve.log")"
[ "$(cat "$WORK/victim")" = precious ] || fail "writing the token followed a planted symlink"
[ "$(stat -c %a "$WORK/token")" = 600 ] || fail "the token file is mode $(stat -c %a "$WORK/token")"

/usr/bin/python3 - "$url" "$(cat "$WORK/token")" "$server" "$K3LAB_SANDBOX_STORE" <<'PY'
import json, re, select, socket, sys, threading, time

url, token, pid, store = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
host, port = url[len("http://"):].split(":")
port = int(port)
auth = f"Authorization: Bearer {token}\r\n"

def peak_rss_mib():
    status = open(f"/proc/{pid}/status").read()
    return int(re.search(r"VmHWM:\s+(\d+) kB", status).group(1)) / 1024

def connect():
    return socket.create_connection((host, port), timeout=30)

def read_response(s):
    data = b""
    while True:
        try:
            chunk = s.recv(65536)
        except (ConnectionResetError, socket.timeout):
            break
        if not chunk:
            break
        data += chunk
        head, sep, body = data.partition(b"\r\n\r\n")
        length = re.search(rb"(?i)\r\ncontent-length: *(\d+)", head)
        if sep and length and len(body) >= int(length.group(1)):
            break
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 "), f"not an HTTP response: {data[:200]!r}"
    return int(head[9:12]), body

def request(text, body=b""):
    with connect() as s:
        s.sendall(text.encode() + body)
        return read_response(s)

def error_of(status, body):
    assert status >= 400, (status, body)
    message = json.loads(body)["error"]
    assert "\n" not in message and message, message
    return message

def expect(want, text, body=b""):
    status, reply = request(text, body)
    assert status == want, (want, status, reply, text[:200])
    return error_of(status, reply) if want >= 400 else json.loads(reply)

# The token first, whatever the route or method; then a JSON error for each.
for line in ["GET /nope HTTP/1.1", "DELETE /v1/health HTTP/1.1", "PATCH /v1/run HTTP/1.1",
             "GET /v1/health HTTP/1.1"]:
    assert expect(401, f"{line}\r\n\r\n") == "missing or wrong bearer token"
assert expect(404, f"GET /nope HTTP/1.1\r\n{auth}\r\n").startswith("no such route")
assert "it takes GET" in expect(405, f"DELETE /v1/health HTTP/1.1\r\n{auth}\r\n")
assert expect(405, f"PATCH /v1/run HTTP/1.1\r\n{auth}Content-Length: 0\r\n\r\n") == "method PATCH is not supported"
assert expect(400, f"GET /v1/health HTTP/1.1\r\n{auth}Content-Length: -1\r\n\r\n")
assert expect(400, "NONSENSE\r\n\r\n")
# Exactly the token: no trailing space, no percent-encoding, no second header.
assert expect(200, f"GET /v1/health HTTP/1.1\r\n{auth}\r\n")["ok"]
for bad in [f"Authorization: Bearer {token} \r\n", f"Authorization: Bearer%20{token}\r\n",
            f"Authorization: Bearer {token[:-1]}%{ord(token[-1]):02x}\r\n", auth + auth]:
    expect(401, f"GET /v1/health HTTP/1.1\r\n{bad}\r\n")

# Big unauthenticated bodies: 401 before they are read; the service's peak memory does not grow
# by their size (4 x 100 MiB).
before = peak_rss_mib()
def big_body(results):
    with connect() as s:
        s.sendall(b"POST /v1/run HTTP/1.1\r\nContent-Length: 104857600\r\n\r\n")
        t = time.monotonic()
        def send():
            try:
                for _ in range(100):
                    s.sendall(b"x" * (1 << 20))
            except OSError:
                pass
        threading.Thread(target=send, daemon=True).start()
        results.append((read_response(s)[0], time.monotonic() - t))
results = []
threads = [threading.Thread(target=big_body, args=(results,)) for _ in range(4)]
for t in threads: t.start()
for t in threads: t.join()
assert [r[0] for r in results] == [401] * 4, results
assert max(r[1] for r in results) < 3, results
grown = peak_rss_mib() - before
assert grown < 50, f"the service's peak memory grew by {grown:.0f} MiB"
# Authenticated: bodies over the limit or without a length are refused unread.
assert "exceeds the limit" in expect(413, f"PUT /v1/sandboxes/x/files?path=/a HTTP/1.1\r\n{auth}Content-Length: 1000000000000\r\n\r\n")
assert "Content-Length" in expect(411, f"POST /v1/run HTTP/1.1\r\n{auth}Transfer-Encoding: chunked\r\n\r\n")
assert "Content-Length" in expect(411, f"POST /v1/run HTTP/1.1\r\n{auth}\r\n")

# Headers: too many lines, too many bytes (one endless line, or 60 MiB of lines): 431, quickly.
assert "header lines" in expect(431, "GET /v1/health HTTP/1.1\r\n" + "X: y\r\n" * 200 + "\r\n")
assert "exceed" in expect(431, "GET /v1/health HTTP/1.1\r\nX: " + "y" * (1 << 20) + "\r\n\r\n")
with connect() as s:
    s.sendall(b"GET /v1/health HTTP/1.1\r\n")
    t = time.monotonic()
    try:
        for _ in range(60):
            s.sendall((b"X-Filler: " + b"z" * 1000 + b"\r\n") * 1024)
    except OSError:
        pass
    status, body = read_response(s)
    assert status == 431 and time.monotonic() - t < 5, (status, body)
grown = peak_rss_mib() - before
assert grown < 50, f"the service's peak memory grew by {grown:.0f} MiB"

# 32 slow unauthenticated clients, each sending a byte of its request every 0.2 s: health checks
# still answer, each within 2 s, and each slow client gets 408 at the 10 s head deadline.
slow_ends = []
def dribble():  # stops sending once the answer comes: bytes sent after the close reset it
    with connect() as s:
        t = time.monotonic()
        try:
            for byte in b"GET /v1/health HTTP/1.1\r\nX-Slow: " + b"s" * 1000:
                s.sendall(bytes([byte]))
                if select.select([s], [], [], 0.2)[0]:
                    break
        except OSError:
            pass
        slow_ends.append((read_response(s)[0], time.monotonic() - t))
slow = [threading.Thread(target=dribble, daemon=True) for _ in range(32)]
for t in slow: t.start()
time.sleep(1)
health_took = []
for _ in range(10):
    t = time.monotonic()
    assert expect(200, f"GET /v1/health HTTP/1.1\r\n{auth}\r\n")["ok"]
    health_took.append(time.monotonic() - t)
    assert health_took[-1] < 2, f"a health check took {health_took[-1]:.1f} s beside 32 slow clients"
    time.sleep(0.2)
for t in slow: t.join(30)
assert [e[0] for e in slow_ends] == [408] * 32, slow_ends
assert all(9.5 < e[1] < 20 for e in slow_ends), slow_ends

# Past 512 open connections, more are answered 503; closed, they free their places. Which 8 of
# the 520 are past it is up to the order the server's threads count them in, not the order
# they connected in: exactly 8 are answered, each 503, the rest wait for a request.
idle = [connect() for _ in range(520)]
answered, deadline = [], time.monotonic() + 30
while len(answered) < 8 and time.monotonic() < deadline:
    answered += select.select([s for s in idle if s not in answered], [], [], 0.5)[0]
assert [read_response(s)[0] for s in answered] == [503] * 8, len(answered)
assert not select.select([s for s in idle if s not in answered], [], [], 0.5)[0], "more answers"
for s in idle: s.close()
time.sleep(0.5)
assert expect(200, f"GET /v1/health HTTP/1.1\r\n{auth}\r\n")["ok"]
print(f"measured: 401 to big bodies within {max(r[1] for r in results):.2f} s, peak memory "
      f"+{grown:.0f} MiB, health checks within {max(health_took):.3f} s, 408 after "
      f"{min(e[1] for e in slow_ends):.1f} to {max(e[1] for e in slow_ends):.1f} s")

# A name with a newline: refused, escaped in the one line of the error.
body = json.dumps({"image": "evil\nname", "argv": ["true"]}).encode()
message = expect(400, f"POST /v1/run HTTP/1.1\r\n{auth}Content-Length: {len(body)}\r\n\r\n", body)
assert message.startswith("unknown image 'evil\\x0aname'"), message
# A damaged manifest: a 500 naming the file, in the service's words.
names = open(f"{store}/names/damaged").read().strip()
manifest = f"{store}/images/{names}.json"
for damage in ["{not json", '{"layers": 7}', "[]"]:
    open(manifest, "w").write(damage)
    body = json.dumps({"image": "damaged"}).encode()
    message = expect(500, f"POST /v1/sandboxes HTTP/1.1\r\n{auth}Content-Length: {len(body)}\r\n\r\n", body)
    assert message.startswith(f"image manifest {manifest} is damaged"), message
print("http: ok")
PY
expect_error "--port 70000: must be in \[0, 65535\]" "$K3LAB" sandbox serve --port 70000
echo "sandbox serve http: ok"
