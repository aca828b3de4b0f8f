"""The HTTP client the CLI uses (appliance.client), against a real server with API keys on."""
from __future__ import annotations

import pytest

from appliance.client import ApplianceClient, ServerError, ServerUnreachable, _events
from support import LiveServer, free_port, make_settings, write_keys

TEXT = "Lighthouse keepers logged every passing ship by hand."


@pytest.fixture(scope="module")
def keyed(tmp_path_factory, models_dir):
    """A server with keys for tenants `acme` (one document stored) and `other`; generation off."""
    folder = tmp_path_factory.mktemp("keyed")
    keys_file, keys = write_keys(folder, ["acme", "other"])
    with LiveServer(make_settings(folder / "state", models_dir, admission_keys_file=str(keys_file))) as live:
        with ApplianceClient(live.url, keys["acme"]) as client:
            stored = client.post("/v1/documents", {"partition": "p", "documents": [{"id": "a", "text": TEXT}]})
        assert stored["tenant"] == "acme"  # named by the key alone
        yield live, keys


def test_the_key_is_sent_and_names_the_tenant(keyed):
    live, keys = keyed
    with ApplianceClient(live.url, keys["acme"]) as client:
        assert client.post("/v1/search", {"query": "lighthouse ships"})["results"][0]["document_id"] == "a"
        assert client.get("/v1/cache/entries", {"limit": 5}) == {"tenant": "acme", "entries": []}
    with ApplianceClient(live.url, keys["other"]) as client:
        assert client.get("/v1/cache/entries") == {"tenant": "other", "entries": []}


def test_refusals_are_typed_with_status_and_body(keyed):
    live, keys = keyed
    for key in (None, "rak_wrong"):
        with ApplianceClient(live.url, key) as client, pytest.raises(ServerError) as refused:
            client.get("/v1/partitions")
        assert refused.value.status == 401 and "API key" in refused.value.body
    with ApplianceClient(live.url, keys["acme"]) as client, pytest.raises(ServerError) as missing:
        client.delete("/v1/cache/entries/7")
    assert missing.value.status == 404 and str(missing.value).startswith("server answered 404: ")


def test_answers_stream_as_events(keyed):
    live, keys = keyed
    with ApplianceClient(live.url, keys["acme"]) as client:
        events = list(client.stream_sse("/v1/ask", {"question": "who logged the ships?", "stream": True}))
    assert [event for event, _ in events] == ["sources", "token", "done"]  # generation is off: retrieval-only
    sources, token, done = (data for _, data in events)
    assert sources["sources"][0]["document_id"] == "a" and done["degraded"] and TEXT in done["answer"]
    assert token["text"] == done["answer"], "the degraded answer reaches a client that reads only tokens"
    with ApplianceClient(live.url) as client, pytest.raises(ServerError) as refused:
        list(client.stream_sse("/v1/ask", {"question": "who logged the ships?", "stream": True}))
    assert refused.value.status == 401


def test_is_up_tells_a_ready_server_from_none(keyed):
    live, _ = keyed
    with ApplianceClient(live.url) as client:
        assert client.is_up()  # /readyz needs no key
    with ApplianceClient(f"http://127.0.0.1:{free_port()}") as nobody:
        assert not nobody.is_up()
        with pytest.raises(ServerUnreachable):
            nobody.get("/v1/partitions")


def test_event_stream_parsing():
    lines = [": a comment", "event: token", 'data: {"text": "a"}', "", 'data: {"n":', "data: 1}", "",
             "event: done", "data: {}"]
    assert list(_events(iter(lines))) == [("token", {"text": "a"}), ("message", {"n": 1}), ("done", {})]
