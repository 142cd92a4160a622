"""corral.toml routes a model name to an OpenAI-compatible server (vLLM, Ollama, llama.cpp)."""

from __future__ import annotations

from pathlib import Path

import anthropic
import pytest

from tests.api.helpers import LOOKUP, events, make_session, say, wait_idle
from tests.fakes.messages_server import FakeModelServer, Text, ToolUse, Turn
from tests.server import ServerProcess


def test_openai_compatible_route_from_config(tmp_path: Path, fake_model: FakeModelServer) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "corral.toml").write_text(
        "[[models.routes]]\n"
        'match = "llama*"\n'
        'provider = "openai"\n'
        f'base_url = "{fake_model.openai_url}"\n'
        'api_key_env = "LOCAL_LLM_KEY"\n'
        'model = "llama3.1:8b"\n'
    )
    server = ServerProcess(data, env={"LOCAL_LLM_KEY": "local-secret"}).start()
    try:
        client = server.client()
        fake_model.reset(
            [
                Turn([Text("checking"), ToolUse("lookup", {"key": "k"})]),
                Turn([Text("local model says hi")]),
            ]
        )
        session_id, _ = make_session(client, model="llama-3-local", tools=[LOOKUP])
        say(client, session_id, "hello local")
        idle = wait_idle(client, session_id, stop="requires_action")
        client.beta.sessions.events.send(
            session_id,
            events=[
                {
                    "type": "user.custom_tool_result",
                    "custom_tool_use_id": idle.stop_reason.event_ids[0],
                    "content": [{"type": "text", "text": "v"}],
                }
            ],
        )
        wait_idle(client, session_id, stop="end_turn")
        texts = [e.content[0].text for e in events(client, session_id) if e.type == "agent.message"]
        assert texts[-1] == "local model says hi"
        recorded = fake_model.recorded[-1]
        assert recorded.path == "/v1/chat/completions"
        assert recorded.body["model"] == "llama3.1:8b"
        assert recorded.headers.get("authorization") == "Bearer local-secret"
        assert any(m["role"] == "tool" for m in recorded.body["messages"])
        with pytest.raises(anthropic.BadRequestError) as info:
            client.beta.agents.create(model="mistral-7b", name="unrouted")
        assert "model" in info.value.message
    finally:
        server.stop()
