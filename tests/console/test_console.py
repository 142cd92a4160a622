"""The web console in headless Chromium against a real server and the fake model.

A user signs in, sees sessions, watches a live timeline grow over SSE, confirms an
`always_ask` tool, answers a custom tool and interrupts from the page, diffs two agent
versions and downloads a file; axe-core checks every page for serious and critical
accessibility violations, and the pages are checked on a phone-sized viewport.

Needs Debian's `chromium` and `chromium-driver` (`make install` installs them with apt);
skipped only when they are not installed.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import anthropic
import pytest

from tests.fakes.messages_server import (
    FakeModelServer,
    Text,
    Thinking,
    ToolUse,
    Turn,
    Usage,
    by_marker,
)
from tests.server import API_KEY, ServerProcess

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"

pytestmark = [
    pytest.mark.bwrap,  # the confirmed `bash` call runs in a real sandbox
    pytest.mark.skipif(
        not (CHROMIUM.exists() and Path(CHROMEDRIVER).exists()),
        reason="headless browser test needs Debian's chromium and chromium-driver packages "
        "(`make install` installs them with apt-get; they could not be installed here)",
    ),
]

ASK_BASH = {
    "type": "agent_toolset_20260401",
    "default_config": {"enabled": False},
    "configs": [{"name": "bash", "enabled": True, "permission_policy": {"type": "always_ask"}}],
}
LOOKUP = {
    "type": "custom",
    "name": "lookup",
    "description": "Look a ticket up in the tracker.",
    "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}},
}
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
)
WAIT = 60.0


@dataclass
class Stack:
    server: ServerProcess
    client: anthropic.Anthropic
    agent_id: str
    environment_id: str
    seed_session: str
    story_session: str
    file_name: str
    file_bytes: bytes


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A server on SQLite (the console is a client of the API: the store does not matter)."""
    story = [
        Turn(
            [Thinking("the tracker first"), ToolUse("bash", {"command": "echo console-allowed"})],
            usage=Usage(input_tokens=120, output_tokens=30),
        ),
        Turn([ToolUse("lookup", {"q": "ticket 42"})]),
        Turn([Text("All done: the ticket is answered.")]),
        Turn([Text("too late")], first_token_delay=120.0),  # interrupted from the page
    ]
    handler = by_marker({"story": story, "seed": [Turn([Text("seeded")])]})
    with FakeModelServer(handler) as fake:
        server = ServerProcess(tmp_path_factory.mktemp("console"), model_url=fake.url).start()
        try:
            client = server.client()
            agent = client.beta.agents.create(
                model="claude-sonnet-4-5",
                name="triage",
                system="You triage tickets.",
                tools=[ASK_BASH, LOOKUP],  # type: ignore[list-item]
            )
            client.beta.agents.update(
                agent.id, version=agent.version, system="You triage tickets carefully."
            )
            env = client.beta.environments.create(name="local", config={"type": "cloud"})
            seed = client.beta.sessions.create(
                agent=agent.id, environment_id=env.id, title="seed session"
            )
            client.beta.sessions.events.send(
                seed.id,
                events=[{"type": "user.message", "content": [{"type": "text", "text": "seed"}]}],
            )
            other_env = client.beta.environments.create(name="second", config={"type": "cloud"})
            story_session = client.beta.sessions.create(
                agent=agent.id, environment_id=other_env.id, title="story session"
            )
            data = b"line one\nline two\n"
            client.beta.files.upload(file=("notes.txt", data, "text/plain"))
            client.beta.skills.create(
                files=[("runbook/SKILL.md", b"---\nname: runbook\n---\nsteps", "text/markdown")],
                display_name="On-call runbook",
            )
            store = client.beta.memory_stores.create(name="team notes")
            client.beta.memory_stores.memories.create(
                store.id, path="/oncall.md", content="page the SRE"
            )
            vault = client.beta.vaults.create(display_name="team vault")
            client.beta.vaults.credentials.create(
                vault.id,
                display_name="tracker token",
                auth={
                    "type": "static_bearer",
                    "mcp_server_url": "https://mcp.example.com/sse",
                    "token": "sk-very-secret-token",
                },
            )
            yield Stack(
                server, client, agent.id, env.id, seed.id, story_session.id, "notes.txt", data
            )
        finally:
            server.stop()


@pytest.fixture(scope="module")
def downloads(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("downloads")


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory, downloads: Path) -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    options.add_argument("--window-size=1280,900")
    options.add_experimental_option(
        "prefs",
        {"download.default_directory": str(downloads), "download.prompt_for_download": False},
    )
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def signed_in(browser: Any, stack: Stack) -> Any:
    """The browser with the key in the console's tab storage (as signing in leaves it)."""
    browser.get(f"{stack.server.url}/console/")
    browser.execute_script("sessionStorage.setItem('corral.apiKey', arguments[0])", API_KEY)
    return browser


def wait_for(what: str, check: Callable[[], Any], timeout: float = WAIT) -> Any:
    """Poll `check` until it returns something truthy."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            found = check()
            if found:
                return found
        except Exception as exc:  # the DOM changes under us while the page updates
            last = exc
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what} (last error: {last!r})")


def text_of(driver: Any, css: str) -> str:
    """textContent (includes collapsed <details>), '' if absent."""
    return str(
        driver.execute_script(
            "const el = document.querySelector(arguments[0]); return el ? el.textContent : '';",
            css,
        )
    )


def axe_violations(driver: Any) -> list[dict[str, Any]]:
    """Run axe-core (shipped in the axe-selenium-python wheel) in the page."""
    source = (
        resources.files("axe_selenium_python") / "node_modules" / "axe-core" / "axe.min.js"
    ).read_text()
    driver.execute_script(source)
    result = driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "axe.run(document, {resultTypes: ['violations']})"
        ".then((r) => done(JSON.stringify(r.violations)), (e) => done('error: ' + e));"
    )
    assert not str(result).startswith("error"), result
    return list(json.loads(result))


def assert_accessible(driver: Any, page: str) -> None:
    bad = [v for v in axe_violations(driver) if v.get("impact") in ("serious", "critical")]
    summary = [
        (v["id"], v["impact"], [n["target"] for n in v["nodes"]][:3], v["help"]) for v in bad
    ]
    assert not bad, f"{page}: axe found {summary}"


def open_page(driver: Any, stack: Stack, fragment: str, heading: str) -> None:
    driver.get(f"{stack.server.url}/console/#/{fragment}")
    try:
        wait_for(f"{fragment} page", lambda: heading in text_of(driver, "main h1"))
    except AssertionError as exc:
        logs = driver.get_log("browser") if hasattr(driver, "get_log") else []
        page = text_of(driver, "main")
        raise AssertionError(f"{exc}; at {driver.current_url}: {page!r}; {logs}") from exc
    assert not driver.find_elements("css selector", "main .error"), text_of(driver, "main")


def click_button(driver: Any, label: str) -> None:
    buttons = [b for b in driver.find_elements("css selector", "button") if b.text == label]
    assert buttons, f"no button {label!r}"
    buttons[0].click()


def log_types(stack: Stack) -> list[Any]:
    return list(stack.client.beta.sessions.events.list(stack.story_session, limit=1000))


def test_sign_in_and_sessions_list(browser: Any, stack: Stack) -> None:
    browser.get(f"{stack.server.url}/console")  # redirected to /console/
    browser.execute_script("sessionStorage.clear()")
    browser.refresh()
    key = wait_for("sign-in form", lambda: browser.find_element("id", "api-key"))
    assert_accessible(browser, "sign in")
    key.send_keys("wrong-key")
    click_button(browser, "Sign in")
    wait_for("refusal", lambda: "refused" in text_of(browser, "main"))
    key = browser.find_element("id", "api-key")
    key.clear()
    key.send_keys(API_KEY)
    click_button(browser, "Sign in")
    wait_for("sessions list", lambda: "seed session" in text_of(browser, "#session-results"))
    # The key lives in this tab's sessionStorage only.
    assert browser.execute_script("return sessionStorage.getItem('corral.apiKey')") == API_KEY
    assert browser.execute_script("return localStorage.length") == 0
    # Live status: the seed session's turn ends while the list is open.
    wait_for(
        "seed session idle",
        lambda: stack.client.beta.sessions.retrieve(stack.seed_session).status == "idle",
    )
    row = f"a[href='#/sessions/{stack.seed_session}']"
    wait_for(
        "idle badge",
        lambda: (
            browser.execute_script(
                f"return document.querySelector(\"{row}\").closest('tr').textContent"
            ).find("idle")
            >= 0
        ),
    )
    # Filters: terminated shows nothing, idle shows the seed session.
    from selenium.webdriver.support.ui import Select

    Select(browser.find_element("id", "f-status")).select_by_value("terminated")
    click_button(browser, "Apply filters")
    wait_for("empty filter", lambda: "No sessions match" in text_of(browser, "#session-results"))
    Select(browser.find_element("id", "f-status")).select_by_value("idle")
    Select(browser.find_element("id", "f-env")).select_by_value(stack.environment_id)
    click_button(browser, "Apply filters")
    wait_for("idle filter", lambda: "seed session" in text_of(browser, "#session-results"))
    assert "story session" not in text_of(browser, "#session-results")
    browser.execute_script("document.getElementById('f-after').value = '2099-01-01T00:00'")
    click_button(browser, "Apply filters")
    wait_for("time filter", lambda: "No sessions match" in text_of(browser, "#session-results"))
    assert_accessible(browser, "sessions")
    # The skip link moves focus to the content without leaving the page.
    browser.execute_script("document.querySelector('.skip').click()")
    assert browser.execute_script("return document.activeElement.id") == "main"
    assert "Sessions" in text_of(browser, "main h1")


def test_live_timeline_confirm_answer_interrupt(signed_in: Any, stack: Stack) -> None:
    browser = signed_in
    open_page(browser, stack, f"sessions/{stack.story_session}", "story session")
    wait_for("stream", lambda: text_of(browser, "#live") == "Live")
    # a single-agent session is one thread, its primary, named after its agent
    tree = wait_for("threads", lambda: "sthr_" in (t := text_of(browser, "#threads")) and t)
    assert tree.startswith("triage") and "No threads" not in tree
    assert browser.find_elements("css selector", "#timeline > li") == []

    browser.find_element("id", "message").send_keys("story: is ticket 42 fixed?")
    click_button(browser, "Send message")

    # The timeline grows live over SSE until the always_ask call waits for us.
    wait_for("confirm buttons", lambda: browser.find_elements("css selector", "#pending .allow"))
    timeline = text_of(browser, "#timeline")
    for seen in ("story: is ticket 42 fixed?", "Thinking", "Tool call: bash", "Model request"):
        assert seen in timeline, (seen, timeline)
    assert "in / 30 out tokens" in timeline  # the span's usage; the fake reports 120 in
    assert re.search(r"out tokens · \d+\.\d\d s", timeline), timeline  # and its latency
    assert "requires action" in timeline
    click_button(browser, "Allow bash")

    # The call runs in the sandbox; its output shows in the tool call, then the custom tool
    # waits for an answer.
    wait_for("custom tool form", lambda: browser.find_elements("id", f"answer-{custom_id(stack)}"))
    assert "console-allowed" in text_of(browser, "#timeline")
    browser.find_element("id", f"answer-{custom_id(stack)}").send_keys("ticket 42 is fixed")
    click_button(browser, "Send result for lookup")
    wait_for("final answer", lambda: "All done" in text_of(browser, "#timeline"))
    wait_for("idle", lambda: "idle" in text_of(browser, "#session-status"))
    assert "Nothing is waiting for you" in text_of(browser, "#pending")
    assert "USD" in text_of(browser, "#session-cost")

    log = log_types(stack)
    confirmation = next(e for e in log if e.type == "user.tool_confirmation")
    assert confirmation.result == "allow"
    answer = next(e for e in log if e.type == "user.custom_tool_result")
    assert answer.content[0].text == "ticket 42 is fixed"
    assert_accessible(browser, "timeline")

    # Interrupt a model call that would take 30 s.
    browser.find_element("id", "message").send_keys("one more thing")
    click_button(browser, "Send message")
    wait_for("running", lambda: "running" in text_of(browser, "#session-status"))
    wait_for("model call", lambda: "in progress" in text_of(browser, "#timeline"))
    click_button(browser, "Interrupt")
    wait_for("interrupted", lambda: "Interrupted by the user" in text_of(browser, "#timeline"))
    wait_for("idle again", lambda: "idle" in text_of(browser, "#session-status"))
    log = log_types(stack)
    assert any(e.type == "user.interrupt" for e in log)
    assert not any(e.type == "agent.message" and "too late" in str(e.content) for e in log)


def custom_id(stack: Stack) -> str:
    """The id of the custom tool call, once logged."""
    uses = [e for e in log_types(stack) if e.type == "agent.custom_tool_use"]
    return uses[0].id if uses else "none-yet"


def test_agent_version_diff(signed_in: Any, stack: Stack) -> None:
    browser = signed_in
    open_page(browser, stack, f"agents/{stack.agent_id}", "Agent triage")
    click_button(browser, "Show diff")
    wait_for("diff", lambda: browser.find_elements("css selector", "#diff ins"))
    added = text_of(browser, "#diff ins")
    removed = text_of(browser, "#diff del")
    assert "You triage tickets carefully." in added
    assert "You triage tickets." in removed
    assert "1 → version 2" in text_of(browser, "#diff-result h3")
    assert_accessible(browser, "agent")


def test_other_pages(signed_in: Any, stack: Stack, downloads: Path) -> None:
    browser = signed_in
    open_page(browser, stack, "environments", "Environments")
    assert "local" in text_of(browser, "main table")
    assert_accessible(browser, "environments")

    open_page(browser, stack, "files", "Files")
    click_button(browser, f"Download {stack.file_name}")
    saved = wait_for("download", lambda: list(downloads.glob("notes*.txt")))
    assert wait_for("file written", lambda: saved[0].read_bytes() == stack.file_bytes)
    assert_accessible(browser, "files")

    open_page(browser, stack, "vaults", "Vaults")
    wait_for("credentials", lambda: "tracker token" in text_of(browser, "main"))
    page = text_of(browser, "main")
    assert "static_bearer" in page and "https://mcp.example.com/sse" in page
    assert "sk-very-secret-token" not in browser.page_source
    assert_accessible(browser, "vaults")

    open_page(browser, stack, "skills", "Skills")
    assert "On-call runbook" in text_of(browser, "main table")
    assert_accessible(browser, "skills")

    open_page(browser, stack, "memory", "Memory stores")
    wait_for("memories", lambda: "/oncall.md" in text_of(browser, "main"))
    assert "team notes" in text_of(browser, "main h2")
    assert_accessible(browser, "memory")

    open_page(browser, stack, "usage", "Usage")
    usage = text_of(browser, "main table")
    assert "triage" in usage and "USD" in usage
    assert_accessible(browser, "usage")


def test_phone_viewport(signed_in: Any, stack: Stack) -> None:
    browser = signed_in
    browser.set_window_size(390, 844)
    try:
        for fragment, heading in (
            ("sessions", "Sessions"),
            (f"sessions/{stack.story_session}", "story session"),
            (f"agents/{stack.agent_id}", "Agent triage"),
        ):
            open_page(browser, stack, fragment, heading)
            time.sleep(0.3)  # let the list fill
            width = browser.execute_script("return window.innerWidth")
            assert width <= 420
            scroll = browser.execute_script("return document.documentElement.scrollWidth")
            assert scroll <= width, f"{fragment}: page scrolls sideways ({scroll} > {width})"
            assert browser.find_element("css selector", "nav").is_displayed()
        # Tables turn into labelled cards.
        open_page(browser, stack, "sessions", "Sessions")
        wait_for("rows", lambda: browser.find_elements("css selector", "#session-results td"))
        display = browser.execute_script(
            "return getComputedStyle(document.querySelector('#session-results td')).display"
        )
        assert display == "block"
        assert_accessible(browser, "sessions on a phone")
    finally:
        browser.set_window_size(1280, 900)
