"""Uploads in progress wait on disk within a box-wide byte budget (parse.spool_max_bytes): a tenant past its share
gets 429, everyone gets 503 once the box's budget is held, and a request's files and reservation go when it ends,
however it ends (answered, refused, or its client gone)."""
from __future__ import annotations

import re
import socket
import time

import pytest

from support import LiveServer, make_settings, write_keys

HELD = 1_900_000  # a body that is announced but not sent: its Content-Length stays reserved while it trickles


@pytest.fixture(scope="module")
def spool_box(tmp_path_factory, models_dir):
    data_dir = tmp_path_factory.mktemp("spool")
    (data_dir / "spool").mkdir()
    (data_dir / "spool" / "left-by-a-crash.part").write_bytes(b"x" * 1000)
    keys_file, keys = write_keys(data_dir, ["acme", "other", "third"], admin=True)
    settings = make_settings(data_dir, models_dir, admission_keys_file=str(keys_file),
                             parse_max_upload_bytes="2000000", parse_max_file_bytes="2000000",
                             parse_spool_max_bytes="4000000", parse_spool_tenant_share="0.5")
    with LiveServer(settings) as server:
        server.keys = keys
        yield server


def _upload(live: LiveServer, tenant: str, name: str, data: bytes):
    with live.client(live.keys[tenant]) as c:
        return c.post("/v1/files", data={"partition": "docs"}, files=[("file", (name, data, "text/plain"))])


def _spool_bytes(live: LiveServer) -> int:
    with live.client(live.keys["admin"]) as c:
        text = c.get("/metrics").text
    return int(float(re.search(r"^appliance_upload_spool_bytes (\S+)$", text, re.M).group(1)))


def _hold(live: LiveServer, tenant: str) -> socket.socket:
    """An upload whose headers announce HELD bytes and whose body has only begun: the server reserves them."""
    sock = socket.create_connection(("127.0.0.1", live.port))
    head = b'--B\r\nContent-Disposition: form-data; name="file"; filename="slow.txt"\r\n\r\n'
    sock.sendall(b"POST /v1/files HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: multipart/form-data; boundary=B\r\n"
                 + f"Authorization: Bearer {live.keys[tenant]}\r\nContent-Length: {HELD}\r\n\r\n".encode()
                 + head + b"the pump " * 1000)
    return sock


def _wait_for(condition, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_what_a_crash_left_in_the_spool_is_removed_at_boot(spool_box):
    assert not (spool_box.settings.spool_dir / "left-by-a-crash.part").exists()
    assert spool_box.settings.spool_dir.is_dir()


def test_a_stored_upload_leaves_nothing_in_the_spool_and_its_original_is_kept(spool_box):
    data = b"The pump restarts at night after a power cut.\n" * 100
    reply = _upload(spool_box, "acme", "pump.txt", data)
    assert reply.status_code == 200, reply.text
    assert list(spool_box.settings.spool_dir.iterdir()) == [] and _spool_bytes(spool_box) == 0
    with spool_box.client(spool_box.keys["acme"]) as c:
        assert c.get("/v1/documents/pump.txt/file").content == data


def test_a_tenant_past_its_share_gets_429_and_a_full_box_503_until_the_bytes_are_released(spool_box):
    small, big = b"The valve opens at 3 bar.\n" * 100, b"The valve opens at 3 bar.\n" * 8000  # 2.6 kB, 208 kB
    held = [_hold(spool_box, "acme")]
    try:
        _wait_for(lambda: _spool_bytes(spool_box) >= HELD)
        mine = _upload(spool_box, "acme", "more.txt", big)
        assert mine.status_code == 429 and mine.json()["error"]["code"] == "upload_spool_share", mine.text
        assert int(mine.headers["retry-after"]) > 0
        assert _upload(spool_box, "other", "a.txt", small).status_code == 200, "another tenant has room"
        held.append(_hold(spool_box, "other"))
        _wait_for(lambda: _spool_bytes(spool_box) >= 2 * HELD)
        full = _upload(spool_box, "third", "b.txt", big)
        assert full.status_code == 503 and full.json()["error"]["code"] == "upload_spool_full", full.text
    finally:
        for sock in held:
            sock.close()
    _wait_for(lambda: _spool_bytes(spool_box) == 0)
    _wait_for(lambda: list(spool_box.settings.spool_dir.iterdir()) == [])
    assert _upload(spool_box, "third", "b.txt", small).status_code == 200
    with spool_box.client(spool_box.keys["acme"]) as c:
        ids = {d["id"] for d in c.get("/v1/documents", params={"partition": "docs"}).json()["documents"]}
    assert "slow.txt" not in ids and "more.txt" not in ids, "nothing of a refused or abandoned upload is stored"


def test_a_body_that_repeats_the_delimiter_with_a_wrong_byte_is_refused_at_once(spool_box):
    body = (b'--B\r\nContent-Disposition: form-data; name="file"; filename="x.txt"\r\n\r\n'
            + b"\r\n--B!" * 300_000 + b"\r\n--B--\r\n")
    with spool_box.client(spool_box.keys["acme"]) as c:
        reply = c.post("/v1/files", content=body, headers={"content-type": "multipart/form-data; boundary=B"})
    assert reply.status_code == 400 and reply.json()["error"]["code"] == "invalid_multipart", reply.text
    assert "other bytes than CRLF" in reply.json()["error"]["message"]
    _wait_for(lambda: _spool_bytes(spool_box) == 0)


def test_an_upload_frees_its_spool_share_once_stored_not_after_the_index_wait(tmp_path, models_dir):
    """The route frees its spool bytes through `on_stored`: called once the files are in the blob store, before the
    index is built, so uploads waiting on a slow re-index hold no spool room."""
    from appliance.library import FileInput
    from appliance.wiring import open_services
    from support import run

    seen = []

    async def scenario():
        async with open_services(make_settings(tmp_path, models_dir), warm_up=False, generation=False) as services:
            def stored():
                record = services.library.store.get_partition("acme", "docs")
                searchable = any(p.name == "docs" and p.indexed_version >= record.version
                                 for p in services.library.partitions("acme"))
                seen.append((record.version, searchable, services.library.blobs.exists(digest)))

            digest = FileInput("a.txt", b"The pump restarts at night.").sha256()
            return await services.files.ingest("acme", "docs", [FileInput("a.txt", b"The pump restarts at night.")],
                                               on_stored=stored)

    result = run(scenario())
    assert result.indexed and seen == [(result.version, False, True)], seen
