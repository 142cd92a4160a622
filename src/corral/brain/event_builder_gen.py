"""Writes `corral/brain/event_builder.py`: `event(kind, **fields)` typed per event type.

The log's read-side models (`corral.wire.events.LogEvent`) are the one description of each
event's fields; this renders them as one `TypedDict` per event type and one `@overload` of
`event` per type, so that mypy rejects a field an event does not have (`evaluated_permision`)
and checks the values' types, while the builder at run time rejects the same (see
`LOG_EVENT_FIELDS`). A test fails when the written file is stale:

    uv run python -m corral.brain.event_builder_gen > src/corral/brain/event_builder.py
    uv run ruff format src/corral/brain/event_builder.py
"""

from __future__ import annotations

import json
import types
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel

from corral.wire.events import LogEvent

HEADER = '''"""`event(kind, **fields)`: a new server event body, its fields typed per event type.

Written by `corral.brain.event_builder_gen` from `corral.wire.events` (do not edit; a test
fails when it is stale). Nested models are plain dicts on the write side.
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict, overload

from typing_extensions import Unpack

from corral.ids import new_id, now_rfc3339
from corral.wire.events import LOG_EVENT_FIELDS, LogEventType


class UnknownEventField(TypeError):
    """A brain built an event with a field its type does not have (a misspelling): stored, it
    would be ignored when read back, and its default would silently take its place."""


class CommonFields(TypedDict, total=False):
    """Fields every logged event has (`Logged`); no id (or None) gets a fresh one."""

    id: str | None
    processed_at: str | None
    session_thread_id: str | None
'''

FOOTER = '''


def event(kind: LogEventType, **fields: Any) -> dict[str, Any]:
    """A new server event of type `kind` with a fresh id (unless `id` is given).

    Raises:
        UnknownEventField: a field `kind`'s model does not declare.
    """
    unknown = fields.keys() - LOG_EVENT_FIELDS[kind]
    if unknown:
        raise UnknownEventField(f"{kind} has no field {', '.join(sorted(unknown))}")
    return {
        "id": fields.pop("id", None) or new_id("sevt"),
        "type": kind,
        "processed_at": now_rfc3339(),
        **fields,
    }
'''


def render_type(annotation: Any) -> str:
    """Source text of a field's type as the write side passes it."""
    if annotation is Any:
        return "Any"
    if annotation is type(None):
        return "None"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "dict[str, Any]"
    if isinstance(annotation, type):
        return annotation.__name__
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Literal:
        return f"Literal[{', '.join(json.dumps(a) for a in args)}]"
    if origin in (Union, types.UnionType):
        return " | ".join(render_type(a) for a in args)
    if origin in (list, dict, tuple):
        return f"{origin.__name__}[{', '.join(render_type(a) for a in args)}]"
    raise TypeError(f"no rendering for {annotation!r}")


COMMON = ("type", "id", "processed_at", "session_thread_id")
"""`Logged`'s fields (and the tag): in `CommonFields`, not repeated per event type."""


def class_name(kind: str) -> str:
    words = kind.replace(".", "_").split("_")
    return "".join(w.capitalize() for w in words) + "Fields"


def models() -> list[tuple[str, type[BaseModel]]]:
    """(event type, model) for every log event type, in `LogEvent`'s order."""
    union = get_args(LogEvent)[0]
    found = []
    for model in get_args(union):
        for kind in get_args(model.model_fields["type"].annotation):
            found.append((kind, model))
    return found


def render() -> str:
    parts = [HEADER]
    for kind, model in models():
        own = [name for name in model.model_fields if name not in COMMON]
        lines = [f"\n\n\nclass {class_name(kind)}(CommonFields, total=False):"]
        lines.append(f'    """Fields of `{kind}` (`{model.__name__}`)."""')
        if own:
            lines.append("")
        for name in own:
            lines.append(f"    {name}: {render_type(model.model_fields[name].annotation)}")
        parts.append("\n".join(lines))
    for kind, _ in models():
        parts.append(
            f"\n\n\n@overload\ndef event(\n    kind: Literal[{json.dumps(kind)}], **fields: "
            f"Unpack[{class_name(kind)}]\n) -> dict[str, Any]: ..."
        )
    parts.append(FOOTER)
    return "".join(parts)


if __name__ == "__main__":
    print(render(), end="")
