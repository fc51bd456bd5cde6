"""A small client for `k3lab sandbox serve` (docs/sandbox.md), standard library only.

    from k3lab_sandbox import Client
    c = Client("http://127.0.0.1:8700", token)
    r = c.run(["python3", "-c", "print(6*7)"])           # a fresh sandbox for one command
    with c.sandbox("host") as s:                         # or one that lives across commands
        s.put("/work/main.py", b"print('hi')")
        print(s.exec(["python3", "/work/main.py"])["stdout"])
"""
import json
import urllib.error
import urllib.parse
import urllib.request


class SandboxError(Exception):
    """The service refused a request; the message is its one error line."""

    def __init__(self, status, message):
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


class Client:
    def __init__(self, url, token, timeout=600):
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout

    def request(self, method, path, body=None, raw=None, query=None):
        url = self.url + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        req = urllib.request.Request(url, data=data, method=method)
        req.add_header("Authorization", "Bearer " + self.token)
        if body is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                payload = resp.read()
                if resp.headers.get_content_type() == "application/json":
                    return json.loads(payload)
                return payload
        except urllib.error.HTTPError as e:
            text = e.read().decode(errors="replace")
            try:
                message = json.loads(text)["error"]
            except (ValueError, KeyError, TypeError):
                message = text.strip()
            raise SandboxError(e.code, message) from None

    def health(self):
        return self.request("GET", "/v1/health")

    def images(self):
        return self.request("GET", "/v1/images")

    def run(self, argv, image="host", backend="namespaces", stdin="", timeout_s=None):
        body = {"image": image, "backend": backend, "argv": list(argv), "stdin": stdin}
        if timeout_s is not None:
            body["timeout_s"] = timeout_s
        return self.request("POST", "/v1/run", body)

    def sandbox(self, image="host", backend="namespaces", limits=None):
        body = {"image": image, "backend": backend}
        if limits:
            body["limits"] = limits
        return Sandbox(self, self.request("POST", "/v1/sandboxes", body)["id"])


class Sandbox:
    """One sandbox of the service; destroyed on `with` exit or destroy()."""

    def __init__(self, client, sandbox_id):
        self.client = client
        self.id = sandbox_id

    def exec(self, argv, stdin="", timeout_s=None, env=None, cwd=None):
        body = {"argv": list(argv), "stdin": stdin}
        if timeout_s is not None:
            body["timeout_s"] = timeout_s
        if env is not None:
            body["env"] = [f"{k}={v}" for k, v in env.items()]
        if cwd is not None:
            body["cwd"] = cwd
        return self.client.request("POST", f"/v1/sandboxes/{self.id}/exec", body)

    def put(self, path, data, mode=0o644):
        if isinstance(data, str):
            data = data.encode()
        return self.client.request("PUT", f"/v1/sandboxes/{self.id}/files", raw=data,
                                   query={"path": path, "mode": format(mode, "o")})

    def get(self, path):
        return self.client.request("GET", f"/v1/sandboxes/{self.id}/files", query={"path": path})

    def snapshot(self, name=""):
        return self.client.request("POST", f"/v1/sandboxes/{self.id}/snapshot", {"name": name})["digest"]

    def destroy(self):
        return self.client.request("DELETE", f"/v1/sandboxes/{self.id}")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        try:
            self.destroy()
        except SandboxError:
            pass
