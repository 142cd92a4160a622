"""Which proxy the operator's environment names for a model provider's URL (`HTTPS_PROXY`,
`HTTP_PROXY`, `ALL_PROXY`, `NO_PROXY`, lower- and upper-case), as curl and httpx read them."""

from __future__ import annotations

import pytest

from corral.outbound import environment_proxy

PROXY = "http://proxy.corp:3128"


def proxied(url: str, **env: str) -> str | None:
    proxy = environment_proxy(url, env)
    return None if proxy is None else f"{proxy.url.host.decode()}:{proxy.url.port}"


def test_the_scheme_picks_the_variable_and_lower_case_wins() -> None:
    assert proxied("https://api.anthropic.com", HTTPS_PROXY=PROXY) == "proxy.corp:3128"
    assert proxied("https://api.anthropic.com", HTTP_PROXY=PROXY) is None
    assert proxied("http://llm:8000", HTTP_PROXY=PROXY) == "proxy.corp:3128"
    assert proxied("http://llm:8000", all_proxy="other:8080") == "other:8080"
    both = {"https_proxy": "http://lower:1", "HTTPS_PROXY": "http://upper:2"}
    assert proxied("https://api.anthropic.com", **both) == "lower:1"
    assert proxied("https://api.anthropic.com") is None


@pytest.mark.parametrize(
    ("no_proxy", "url", "bypassed"),
    [
        ("*", "https://api.anthropic.com", True),
        ("anthropic.com", "https://api.anthropic.com", True),
        (".anthropic.com", "https://api.anthropic.com", True),
        ("api.anthropic.com", "https://api.anthropic.com", True),
        ("thropic.com", "https://api.anthropic.com", False),
        ("api.anthropic.com:443", "https://api.anthropic.com", True),
        ("api.anthropic.com:8443", "https://api.anthropic.com", False),
        ("localhost, 127.0.0.1", "https://127.0.0.1:8443", True),
        ("10.0.0.0/8", "http://10.2.3.4:8000", True),
        ("10.0.0.0/8", "http://11.2.3.4:8000", False),
        ("::1", "http://[::1]:8000", True),
        ("[::1]:8000", "http://[::1]:8000", True),
        ("", "https://api.anthropic.com", False),
    ],
)
def test_no_proxy_entries(no_proxy: str, url: str, bypassed: bool) -> None:
    env = {"HTTPS_PROXY": PROXY, "HTTP_PROXY": PROXY, "no_proxy": no_proxy}
    assert (proxied(url, **env) is None) is bypassed
