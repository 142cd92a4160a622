"""A git smart-HTTP server on loopback that requires a token: `git http-backend` (the real
one, as CGI) behind a small threaded HTTP server that checks `Authorization`.

Tokens are accepted as HTTP Basic passwords (any user name), like GitHub does. `tokens` can be
changed while it runs (revoking one); every `Authorization` value it saw is recorded.
"""

from __future__ import annotations

import base64
import http.server
import os
import subprocess
import threading
from pathlib import Path
from types import TracebackType

HTTP_BACKEND = "/usr/lib/git-core/git-http-backend"


def git(*args: str, cwd: Path | None = None) -> str:
    """Run host git for test setup; its stdout."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(cwd or "/"),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
    }
    done = subprocess.run(
        ["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True
    )
    return done.stdout.strip()


class GitServer:
    """Serves the bare repositories under `root` at `http://127.0.0.1:<port>/<path>`."""

    def __init__(self, root: Path, tokens: set[str]) -> None:
        self.root = root
        self.tokens = set(tokens)
        self.seen_authorization: list[str] = []
        self.requests: list[tuple[str, str, int]] = []
        self.chunked_bodies = 0
        """Requests whose body came chunked (git does that above http.postBuffer)."""
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                server._handle(self)

            def do_POST(self) -> None:
                server._handle(self)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = int(self._httpd.server_address[1])

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}/{path}"

    def __enter__(self) -> GitServer:
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def _authorized(self, header: str | None) -> bool:
        if not header or not header.startswith("Basic "):
            return False
        try:
            _, _, password = base64.b64decode(header[6:]).decode().partition(":")
        except ValueError:
            return False
        return password in self.tokens

    def _handle(self, handler: http.server.BaseHTTPRequestHandler) -> None:
        auth = handler.headers.get("Authorization")
        if auth is not None:
            self.seen_authorization.append(auth)
        if handler.headers.get("Transfer-Encoding", "").lower() == "chunked":
            self.chunked_bodies += 1
        body = _read_body(handler)
        path, _, query = handler.path.partition("?")
        if not self._authorized(auth):
            self.requests.append((handler.command, path, 401))
            _reply(handler, 401, {"WWW-Authenticate": 'Basic realm="git"'}, b"no\n")
            return
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "GIT_PROJECT_ROOT": str(self.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "REMOTE_USER": "x-access-token",
            "REMOTE_ADDR": "127.0.0.1",
            "REQUEST_METHOD": handler.command,
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "CONTENT_TYPE": handler.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
        }
        for name in ("Git-Protocol", "Content-Encoding"):
            if handler.headers.get(name):
                env["HTTP_" + name.upper().replace("-", "_")] = handler.headers[name]
        done = subprocess.run([HTTP_BACKEND], input=body, env=env, capture_output=True)
        head, _, out = done.stdout.partition(b"\r\n\r\n")
        status, headers = 200, {}
        for line in head.decode("latin-1").split("\r\n"):
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = int(value.strip().split()[0])
            elif name:
                headers[name] = value.strip()
        self.requests.append((handler.command, path, status))
        _reply(handler, status, headers, out)


def _read_body(handler: http.server.BaseHTTPRequestHandler) -> bytes:
    if handler.headers.get("Transfer-Encoding", "").lower() == "chunked":
        chunks: list[bytes] = []
        while True:
            size = int(handler.rfile.readline().split(b";")[0].strip(), 16)
            if size == 0:
                while handler.rfile.readline() not in (b"\r\n", b""):
                    pass
                return b"".join(chunks)
            chunks.append(handler.rfile.read(size))
            handler.rfile.readline()
    return handler.rfile.read(int(handler.headers.get("Content-Length") or 0))


def _reply(
    handler: http.server.BaseHTTPRequestHandler, status: int, headers: dict[str, str], body: bytes
) -> None:
    handler.send_response(status)
    for name, value in headers.items():
        if name.lower() not in ("content-length", "connection"):
            handler.send_header(name, value)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def make_repository(root: Path, name: str) -> dict[str, str]:
    """A bare repository `root/<name>` with `main` (two commits) and `feature`; returns the
    commit shas by label: first, main, feature."""
    work = root / f"{name}.work"
    work.mkdir(parents=True)
    git("init", "--quiet", "--initial-branch=main", cwd=work)
    (work / "README").write_text("first\n")
    git("add", "README", cwd=work)
    git("commit", "--quiet", "-m", "first", cwd=work)
    first = git("rev-parse", "HEAD", cwd=work)
    (work / "README").write_text("second\n")
    git("commit", "--quiet", "-am", "second", cwd=work)
    main = git("rev-parse", "HEAD", cwd=work)
    git("checkout", "--quiet", "-b", "feature", first, cwd=work)
    (work / "feature.txt").write_text("on the feature branch\n")
    git("add", "feature.txt", cwd=work)
    git("commit", "--quiet", "-m", "feature work", cwd=work)
    feature = git("rev-parse", "HEAD", cwd=work)
    git("clone", "--quiet", "--bare", str(work), str(root / name), cwd=root)
    git("--git-dir", str(root / name), "symbolic-ref", "HEAD", "refs/heads/main", cwd=root)
    return {"first": first, "main": main, "feature": feature}
