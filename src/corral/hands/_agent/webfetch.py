"""The `web_fetch` tool: GET a URL through the sandbox's egress proxy and return readable text.

Runs inside the sandbox, so every hop (redirects included) leaves through the egress proxy and
obeys the environment's networking; the domain lists here only honour the tool's config and
are not a security boundary. Stdlib only.
"""

from __future__ import annotations

import contextlib
import http.client
import signal
import socket
import ssl
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urljoin, urlsplit

from .filetools import ToolFailure
from .htmltext import html_to_text

MAX_REDIRECTS = 5
TIME_LIMIT = 30.0
MAX_RAW_BYTES = 2 * 1024 * 1024
CHARS_PER_TOKEN = 4
PROXY_HOST = "127.0.0.1"
_REDIRECTS = (301, 302, 303, 307, 308)
_HTML = ("text/html", "application/xhtml+xml")
_TEXT_TYPES = (
    "application/json", "application/xml", "application/javascript", "application/ecmascript",
    "application/x-javascript", "application/yaml", "application/x-yaml", "application/toml",
    "application/x-sh", "application/sql", "application/graphql", "application/x-ndjson",
)  # fmt: skip
_HEADERS = {
    "User-Agent": "corral-web-fetch/1.0",
    "Accept": "text/html,application/xhtml+xml,text/plain;q=0.9,application/json;q=0.9,*/*;q=0.5",
    "Accept-Encoding": "identity",
}
_PROXY_MARK = b"corral egress proxy:"
_URL_SAFE = "!#$%&'()*+,/:;=?@[]~"


class _Timeout(Exception):
    pass


@dataclass(slots=True)
class Page:
    """One final (non-redirect) response."""

    url: str
    status: int
    reason: str
    headers: dict[str, str]
    body: bytes
    truncated: bool
    redirected_from: list[str] = field(default_factory=list)


def run(tool_input: Mapping[str, Any], proxy_port: int | None, output_bytes: int) -> str:
    """The tool's text result.

    Raises:
        ToolFailure: bad input, refusal by the proxy or the domain lists, network error,
            timeout, non-2xx status or a content type that is not text.
    """
    url = tool_input.get("url")
    if not isinstance(url, str) or not url.strip():
        raise ToolFailure("web_fetch: url must be a non-empty string")
    tokens = tool_input.get("max_content_tokens")
    if tokens is not None and (not isinstance(tokens, int) or isinstance(tokens, bool)):
        raise ToolFailure("web_fetch: max_content_tokens must be an integer")
    if proxy_port is None:
        raise ToolFailure(
            "web_fetch: this sandbox has no network access (the environment's networking "
            "allows none)"
        )
    domains = Domains(tool_input.get("allowed_domains"), tool_input.get("blocked_domains"))
    page = fetch(url.strip(), proxy_port, domains)
    max_chars = tokens * CHARS_PER_TOKEN if tokens is not None and tokens > 0 else None
    return render(page, output_bytes, max_chars)


class Domains:
    """The tool config's `allowed_domains` / `blocked_domains` (a domain covers subdomains)."""

    def __init__(self, allowed: object, blocked: object) -> None:
        self.allowed = _domain_list(allowed)
        self.blocked = _domain_list(blocked)

    def check(self, url: str, host: str) -> None:
        path = urlsplit(url).path or "/"
        if self.blocked is not None and _matches(self.blocked, host, path):
            raise ToolFailure(f"web_fetch: {url} is in blocked_domains of this tool's config")
        if self.allowed is not None and not _matches(self.allowed, host, path):
            raise ToolFailure(f"web_fetch: {url} is not in allowed_domains of this tool's config")


def _domain_list(value: object) -> list[str] | None:
    if not isinstance(value, list):
        return None
    return [str(v).strip().lower().removeprefix("*.").rstrip("/") for v in value if str(v).strip()]


def _matches(rules: list[str], host: str, path: str) -> bool:
    host = host.lower().rstrip(".")
    for rule in rules:
        domain, _, prefix = rule.partition("/")
        if (host == domain or host.endswith("." + domain)) and path.startswith("/" + prefix):
            return True
    return False


def fetch(url: str, proxy_port: int, domains: Domains, time_limit: float = TIME_LIMIT) -> Page:
    """GET `url`, following up to `MAX_REDIRECTS` redirects, all within `time_limit` seconds."""
    history: list[str] = []
    current = url
    try:
        with _deadline(time_limit):
            for _ in range(MAX_REDIRECTS + 1):
                page = _get(current, proxy_port, domains, time_limit)
                location = page.headers.get("location")
                if page.status not in _REDIRECTS or not location:
                    page.redirected_from = history
                    return page
                history.append(current)
                current = urljoin(current, location)
    except (_Timeout, TimeoutError):
        message = f"web_fetch: timed out after {time_limit:g}s fetching {current}"
        raise ToolFailure(message) from None
    raise ToolFailure(f"web_fetch: more than {MAX_REDIRECTS} redirects, starting at {url}")


@contextlib.contextmanager
def _deadline(seconds: float) -> Iterator[None]:
    """SIGALRM after `seconds` (main thread only): socket timeouts alone allow a slow trickle."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_alarm(signum: int, frame: object) -> None:
        raise _Timeout

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _target(url: str) -> tuple[str, str, int, str]:
    """`(scheme, ASCII host, port, request path)`; non-ASCII is percent- or IDNA-encoded."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise ToolFailure(f"web_fetch: only http and https URLs can be fetched, not {url!r}")
    try:
        host, port = parts.hostname or "", parts.port
        host = host if host.isascii() else host.encode("idna").decode("ascii")
    except (ValueError, UnicodeError):
        raise ToolFailure(f"web_fetch: invalid URL {url!r}") from None
    if not host:
        raise ToolFailure(f"web_fetch: URL {url!r} has no host")
    default = 443 if parts.scheme == "https" else 80
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return parts.scheme, host, port or default, quote(path, safe=_URL_SAFE)


def _get(url: str, proxy_port: int, domains: Domains, timeout: float) -> Page:
    scheme, host, port, path = _target(url)
    domains.check(url, host)
    name = f"[{host}]" if ":" in host else host
    authority = f"{name}:{port}"
    default_port = port == (443 if scheme == "https" else 80)
    headers = {**_HEADERS, "Host": name if default_port else authority}
    try:
        if scheme == "https":
            conn: http.client.HTTPConnection = _tunnel(url, host, authority, proxy_port, timeout)
            conn.request("GET", path, headers=headers)
        else:
            conn = http.client.HTTPConnection(PROXY_HOST, proxy_port, timeout=timeout)
            conn.request("GET", f"http://{authority}{path}", headers=headers)
        try:
            response = conn.getresponse()
            body = response.read(MAX_RAW_BYTES + 1)
        finally:
            conn.close()
    except ssl.SSLError as e:
        raise ToolFailure(f"web_fetch: TLS error talking to {host}: {e}") from None
    except ConnectionRefusedError:
        raise ToolFailure("web_fetch: the sandbox's egress proxy is not reachable") from None
    except (http.client.HTTPException, OSError, ValueError) as e:
        if isinstance(e, TimeoutError):
            raise
        raise ToolFailure(f"web_fetch: fetching {url} failed: {e or type(e).__name__}") from None
    headers = {k.lower(): v for k, v in response.getheaders()}
    if body.startswith(_PROXY_MARK) and response.status in (400, 403, 405, 502):
        _refused(url, f"{response.status} {response.reason}", body)
    body = _decoded(url, headers.get("content-encoding", ""), body)
    return Page(
        url=url,
        status=response.status,
        reason=response.reason,
        headers=headers,
        body=body[:MAX_RAW_BYTES],
        truncated=len(body) > MAX_RAW_BYTES,
    )


def _decoded(url: str, encoding: str, body: bytes) -> bytes:
    """The body without a gzip/deflate content-encoding (we ask for none; some send it anyway)."""
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return body
    if encoding not in ("gzip", "x-gzip", "deflate"):
        raise ToolFailure(f"web_fetch: {url} was sent with unsupported encoding {encoding!r}")
    import zlib

    try:
        return zlib.decompressobj(wbits=47).decompress(body, MAX_RAW_BYTES + 1)
    except zlib.error as e:
        raise ToolFailure(f"web_fetch: {url}: cannot decode {encoding} body: {e}") from None


def _refused(url: str, status: str, body: bytes) -> None:
    message = body.decode(errors="replace").strip()
    what = "could not be reached through" if status.startswith("502") else "was refused by"
    raise ToolFailure(f"web_fetch: {url} {what} the egress proxy ({status}): {message}")


def _tunnel(
    url: str, host: str, authority: str, proxy_port: int, timeout: float
) -> http.client.HTTPSConnection:
    """An HTTPS connection through a CONNECT tunnel, keeping the proxy's refusal message."""
    sock = socket.create_connection((PROXY_HOST, proxy_port), timeout=timeout)
    try:
        sock.sendall(f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n".encode())
        head, rest = _read_head(sock)
        status_line = head.split(b"\r\n", 1)[0].decode("latin-1")
        parts = status_line.split(" ", 2)
        if len(parts) < 2 or parts[1] != "200":
            _refused(url, " ".join(parts[1:]), rest + _read_rest(sock))
        context = ssl.create_default_context()
        conn = http.client.HTTPSConnection(host, timeout=timeout, context=context)
        conn.sock = context.wrap_socket(sock, server_hostname=host)
        return conn
    except BaseException:
        sock.close()
        raise


def _read_head(sock: socket.socket) -> tuple[bytes, bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk or len(data) > 65536:
            raise ToolFailure("web_fetch: the egress proxy closed the connection")
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    return head, rest


def _read_rest(sock: socket.socket) -> bytes:
    data = b""
    with contextlib.suppress(OSError):
        while len(data) < 4096 and (chunk := sock.recv(4096)):
            data += chunk
    return data


def render(page: Page, limit: int, max_chars: int | None = None) -> str:
    """The text the model sees: a short header, then the content capped at `max_chars`
    characters and `limit` bytes."""
    mime, charset = _content_type(page.headers.get("content-type", ""))
    text = page.body.decode(charset, errors="replace")
    if not 200 <= page.status < 300:
        excerpt = " ".join(_readable(mime, text, page.url)[1].split())[:1000]
        raise ToolFailure(
            f"web_fetch: {page.url} returned HTTP {page.status} {page.reason}"
            + (f": {excerpt}" if excerpt else "")
        )
    if not _is_text(mime, page.body):
        raise ToolFailure(
            f"web_fetch: {page.url} has content type {mime!r}; only HTML, text and JSON can be "
            "fetched (use bash, e.g. curl, to download other files)"
        )
    title, content = _readable(mime, text, page.url)
    lines = [f"URL: {page.url}"]
    if page.redirected_from:
        lines.append(f"Redirected from: {page.redirected_from[0]}")
    lines += [f"Title: {title}"] if title else []
    lines.append(f"Content-Type: {mime or 'unknown'}")
    notes = []
    if page.truncated:
        notes.append(f"the response was larger than {MAX_RAW_BYTES // 2**20} MiB; only the "
                     "first part was read")  # fmt: skip
    shown = content[:max_chars] if max_chars is not None else content
    if len(shown.encode()) > limit:
        shown = shown.encode()[:limit].decode(errors="ignore")
    if len(shown) < len(content):
        notes.append(f"content truncated: showing {len(shown)} of {len(content)} characters")
        content = shown
    footer = "".join(f"\n[{n}]" for n in notes)
    return "\n".join(lines) + "\n\n" + (content or "(no text content)") + footer


def _content_type(value: str) -> tuple[str, str]:
    mime, _, params = value.partition(";")
    charset = "utf-8"
    for param in params.split(";"):
        key, _, val = param.strip().partition("=")
        if key.lower() == "charset" and val.strip().strip("\"'"):
            charset = val.strip().strip("\"'")
    try:
        import codecs

        codecs.lookup(charset)
    except LookupError:
        charset = "utf-8"
    return mime.strip().lower(), charset


def _is_text(mime: str, body: bytes) -> bool:
    if mime in _HTML or mime.startswith("text/") or mime in _TEXT_TYPES:
        return True
    if mime.endswith(("+json", "+xml")):
        return True
    return not mime and b"\0" not in body[:4096]


def _readable(mime: str, text: str, url: str) -> tuple[str, str]:
    looks_html = not mime and text.lstrip()[:15].lower().startswith(("<!doctype html", "<html"))
    if mime in _HTML or looks_html:
        return html_to_text(text, url)
    return "", text
