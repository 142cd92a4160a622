"""The wire-level fake model (tests/fakes) as a compose service of the smoke test.

On every address of its container, so the workers reach it by service name over the compose
network as they would reach a model provider; `GET /requests` says how many model requests
it has had (the test reads it with `podman exec`, to kill a worker while one is in flight).

    python -m tests.deploy.fake_model_service --port 8099 --script replies.json
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence

import uvicorn
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from tests.fakes.messages_server import FakeModelServer, ScriptedTurns
from tests.fakes.model_script import reply_from_json


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--script", required=True, help="JSON list of replies, in order")
    args = parser.parse_args(argv)
    with open(args.script, encoding="utf-8") as file:
        replies = [reply_from_json(r) for r in json.load(file)]
    fake = FakeModelServer(ScriptedTurns(replies))

    async def requests(_: Request) -> PlainTextResponse:
        return PlainTextResponse(str(len(fake.requests)))

    fake.app.router.routes.append(Route("/requests", requests))
    uvicorn.run(fake.app, host="0.0.0.0", port=args.port, log_level="warning", lifespan="off")


if __name__ == "__main__":
    main()
