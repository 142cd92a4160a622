"""Files and skills API hygiene: media types, attachment downloads, uncompressed skill caps."""

from __future__ import annotations

import io
import zipfile

import anthropic
import httpx
import pytest

from corral.files.service import served_media_type
from corral.service.skill_bundle import MAX_SKILL_BYTES, MAX_SKILL_FILE_BYTES
from tests.server import API_KEY, ServerProcess

SKILL_MD = b"---\nname: zipped-skill\ndescription: from a zip\n---\nbody"
MIB = 1024 * 1024


def raw_upload(server: ServerProcess, name: str, data: bytes, media_type: str) -> httpx.Response:
    return httpx.post(
        f"{server.url}/v1/files",
        headers={"x-api-key": API_KEY},
        files={"file": (name, data, media_type)},
    )


def zip_of(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


@pytest.mark.parametrize(
    "media_type",
    ["text/plain\x01", "text/html\x7f", 'text/plain; a="\x1b[31m"', "notatype", "a/" + "b" * 260],
)
def test_bad_media_types_are_refused_at_upload(server: ServerProcess, media_type: str) -> None:
    response = raw_upload(server, "a.txt", b"x", media_type)
    assert response.status_code == 400, response.text
    body = response.json()
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert "Content-Type" in body["error"]["message"]


def test_downloads_are_attachments_with_nosniff(server: ServerProcess) -> None:
    client = server.client()
    cases = [
        ("page.html", "text/html", "attachment; filename*=UTF-8''page.html"),
        ("résumé v2.txt", "text/plain; charset=utf-8", "attachment; filename*=UTF-8''r%C3%A9sum%C3%A9%20v2.txt"),  # noqa: E501
    ]  # fmt: skip
    for name, media_type, disposition in cases:
        uploaded = client.beta.files.upload(file=(name, b"<script>alert(1)</script>", media_type))
        assert uploaded.mime_type == media_type
        response = httpx.get(
            f"{server.url}/v1/files/{uploaded.id}/content", headers={"x-api-key": API_KEY}
        )
        assert response.status_code == 200
        assert response.headers["content-type"].startswith(media_type.split(";")[0])
        assert response.headers["content-disposition"] == disposition
        assert response.headers["x-content-type-options"] == "nosniff"
        assert client.beta.files.download(uploaded.id).read() == b"<script>alert(1)</script>"


def test_stored_bad_media_types_are_served_as_octet_stream() -> None:
    """Objects stored before validation existed may hold anything."""
    assert served_media_type({"mime_type": "text/html\r\nSet-Cookie: x=1"}) == (
        "application/octet-stream"
    )
    assert served_media_type({"mime_type": None}) == "application/octet-stream"
    assert served_media_type({"mime_type": "image/png"}) == "image/png"


def test_zip_bomb_sent_as_parts_is_refused(server: ServerProcess) -> None:
    """64 MiB of zeros compresses to ~64 KiB: the cap is on what the skill holds uncompressed."""
    client = server.client()
    with pytest.raises(anthropic.BadRequestError) as info:
        client.beta.skills.create(
            files=[
                ("bomb/SKILL.md", b"---\nname: bomb\n---\n", "text/markdown"),
                ("bomb/zeros.bin", bytes(64 * MIB), "application/octet-stream"),
            ]
        )
    assert "uncompressed" in info.value.message


def test_zip_bomb_sent_as_a_zip_is_refused(server: ServerProcess) -> None:
    client = server.client()
    bomb = zip_of({"bomb/SKILL.md": b"---\nname: bomb\n---\n", "bomb/zeros.bin": bytes(64 * MIB)})
    assert len(bomb) < 256 * 1024
    with pytest.raises(anthropic.BadRequestError) as info:
        client.beta.skills.create(files=[("bomb.zip", bomb, "application/zip")])
    assert "uncompressed" in info.value.message
    many = {f"bomb/{i}.bin": bytes(MAX_SKILL_FILE_BYTES) for i in range(4)}
    spread = zip_of({"bomb/SKILL.md": b"---\nname: bomb\n---\n", **many})
    assert 4 * MAX_SKILL_FILE_BYTES > MAX_SKILL_BYTES
    with pytest.raises(anthropic.BadRequestError) as info:
        client.beta.skills.create(files=[("bomb.zip", spread, "application/zip")])
    assert f"at most {MAX_SKILL_BYTES}" in info.value.message


def test_skill_from_a_zip_and_its_download(server: ServerProcess) -> None:
    client = server.client()
    for archive in (
        zip_of({"zipped/SKILL.md": SKILL_MD, "zipped/lib/tool.py": b"print(1)\n"}),
        zip_of({"SKILL.md": SKILL_MD, "lib/tool.py": b"print(1)\n"}),
    ):
        skill = client.beta.skills.create(files=[("zipped.zip", archive, "application/zip")])
        version = client.beta.skills.versions.retrieve(skill.latest_version_id, skill_id=skill.id)
        assert version.name == "zipped-skill" and version.description == "from a zip"
        response = httpx.get(
            f"{server.url}/v1/skills/{skill.id}/versions/{version.id}/content",
            headers={"x-api-key": API_KEY},
        )
        assert response.headers["content-disposition"] == (
            "attachment; filename*=UTF-8''zipped-skill.zip"
        )
        assert response.headers["x-content-type-options"] == "nosniff"
        stored = zipfile.ZipFile(io.BytesIO(response.content))
        assert stored.namelist() == ["zipped-skill/SKILL.md", "zipped-skill/lib/tool.py"]
        assert stored.read("zipped-skill/lib/tool.py") == b"print(1)\n"


@pytest.mark.parametrize(
    "archive",
    [b"PK\x03\x04 not really a zip", zip_of({"x/../../etc/SKILL.md": b"x"}), zip_of({})],
)
def test_bad_zips_are_refused(server: ServerProcess, archive: bytes) -> None:
    client = server.client()
    with pytest.raises(anthropic.BadRequestError):
        client.beta.skills.create(files=[("bad.zip", archive, "application/zip")])
