"""Several boxes: placement by consistent hashing, the HAProxy configuration, the boxes file, and the replication
routes' refusals (here); three real boxes behind a real HAProxy in test_cluster_site.py."""
from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from appliance.cluster import SLOTS, Site, WireError, haproxy_config
from appliance.cluster.haproxy import keys_map
from appliance.cluster.wire import change_json, change_of
from appliance.config import ClusterBox, ConfigError, load_boxes, load_settings
from appliance.store import JournalChange, NewDocument, Place, SourceFile, Store

TENANTS = [f"tenant-{i}" for i in range(3000)]


def boxes(*names: str) -> tuple[ClusterBox, ...]:
    return tuple(ClusterBox(n, f"http://127.0.0.1:{9000 + i}") for i, n in enumerate(names))


def test_each_tenant_has_a_home_and_a_backup_spread_evenly():
    site = Site(boxes("a", "b", "c"), "a")
    homes = {name: 0 for name in "abc"}
    for tenant in TENANTS:
        placed = site.placement(tenant)
        assert placed.backup is not None and placed.home != placed.backup
        assert placed == site.placement(tenant)  # the same answer every time, on every box
        homes[placed.home.name] += 1
    assert all(800 < n < 1200 for n in homes.values()), homes  # about a third each
    assert Site(boxes("a", "b", "c"), "c").placement("x") == site.placement("x")


def test_adding_a_box_moves_only_its_share_of_the_tenants():
    three, four = Site(boxes("a", "b", "c"), "a"), Site(boxes("a", "b", "c", "d"), "a")
    moved = [t for t in TENANTS if three.placement(t).home != four.placement(t).home]
    assert 0.18 < len(moved) / len(TENANTS) < 0.32, len(moved)
    assert all(four.placement(t).home.name == "d" for t in moved)  # to the new box, never between old ones
    for tenant in TENANTS:  # every copy an old box keeps stays where it was
        before = {b.name for b in three.placement(tenant).holders}
        after = {b.name for b in four.placement(tenant).holders}
        assert after - {"d"} <= before


@pytest.mark.skipif(shutil.which("haproxy") is None, reason="Debian's haproxy is not installed (just test installs it)")
@pytest.mark.parametrize("names", [("a",), ("a", "b"), ("a", "b", "c"), ("a", "b", "c", "d")])
def test_haproxy_accepts_the_configuration(tmp_path, names):
    site = Site(boxes(*names), names[0])
    (tmp_path / "keys.map").write_text(keys_map([("sha256:" + "AB" * 32, "acme")]))  # as the keys file has it
    config = haproxy_config(site, "boxes.toml", "127.0.0.1:8000", str(tmp_path / "keys.map"))
    (tmp_path / "haproxy.cfg").write_text(config)
    check = subprocess.run(["haproxy", "-c", "-f", str(tmp_path / "haproxy.cfg")], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    routed = {}
    for line in config.splitlines():
        if line.strip().startswith("use_backend"):
            backend = line.split()[1]
            for slot in line.split("-m int ")[1].rstrip(" }").split():
                assert int(slot) not in routed, f"slot {slot} routed twice"
                routed[int(slot)] = backend
    assert sorted(routed) == list(range(SLOTS))
    for slot, backend in routed.items():  # the balancer's home for a slot is the boxes' home
        placed = site.slot_placement(slot)
        assert backend.startswith(f"home_{placed.home.name}")
        assert backend.endswith(f"_backup_{placed.backup.name}" if placed.backup else placed.home.name)
    assert "path,url_dec -m beg /cluster/" in config and "http-check send meth GET uri /readyz" in config
    assert (tmp_path / "keys.map").read_text() == "ab" * 32 + " acme\n"  # bare hex: what HAProxy computes


def test_cluster_config_command_prints_a_configuration(tmp_path):
    (tmp_path / "boxes.toml").write_text('[[box]]\nname = "a"\nurl = "http://10.0.0.1:8080"\n\n'
                                         '[[box]]\nname = "b"\nurl = "http://10.0.0.2:8080"\n')
    out = subprocess.run([sys.executable, "-m", "appliance", "cluster", "config", "--boxes",
                          str(tmp_path / "boxes.toml"), "--port", "9090"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "bind :9090" in out.stdout and "server a 10.0.0.1:8080" in out.stdout and "backup" in out.stdout


@pytest.mark.parametrize("text, message", [
    ('[[box]]\nname = "a"\nurl = "http://h:1"\n[[box]]\nname = "a"\nurl = "http://h:2"\n', "listed twice"),
    ('[[box]]\nname = "A b"\nurl = "http://h:1"\n', "lowercase"),
    ('[[box]]\nname = "a"\nurl = "ftp://h"\n', "http://host:port"),
    ('[[box]]\nname = "a"\nurl = "http://h:1"\nweight = 2\n', "only `name` and `url`"),
    ('box = 1\n', "expected [[box]]"),
    ('[[box]\n', "not valid TOML"),
])
def test_a_wrong_boxes_file_is_refused_naming_the_problem(tmp_path, text, message):
    (tmp_path / "boxes.toml").write_text(text)
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("`", "`")):
        load_boxes(tmp_path / "boxes.toml")


def test_settings_need_the_box_itself_and_a_secret(tmp_path):
    (tmp_path / "boxes.toml").write_text('[[box]]\nname = "a"\nurl = "http://h:1"\n')
    env = {"APPLIANCE_CLUSTER_BOXES": str(tmp_path / "boxes.toml"), "APPLIANCE_CLUSTER_SELF": "z"}
    with pytest.raises(ConfigError) as caught:
        load_settings(env=env)
    assert "cluster.secret_file: required" in str(caught.value) or "'z' is not a box" in str(caught.value)
    env |= {"APPLIANCE_CLUSTER_SECRET_FILE": "s"}
    with pytest.raises(ConfigError, match="'z' is not a box"):
        load_settings(env=env)
    settings = load_settings(env=env | {"APPLIANCE_CLUSTER_SELF": "a"})
    assert settings.cluster.members == (ClusterBox("a", "http://h:1"),)


def test_the_journal_feeds_each_peer_what_it_holds_and_not_what_it_sent(tmp_path):
    store = Store(tmp_path / "s.sqlite3")
    one = store.ensure_partition("acme", "docs")
    doc = NewDocument("d1", "T", "", ["alpha", "beta"], "h1", places=(Place(1, None, ("A",)), Place(2, 3, ())),
                      file=SourceFile("x.pdf", "0" * 64, "pdf", 10, 3, 2, (2, 3)))
    store.upsert_documents(one.id, [doc])
    other = store.ensure_partition("other", "docs")
    store.upsert_documents(other.id, [NewDocument("o1", "", "", ["x"], "h2")], origin="b")  # came from b
    store.delete_documents(one.id, ["d1"])
    changes, last, more = store.changes_after(0, "b", lambda tenant: True)
    assert [(c.op, c.key) for c in changes] == [("created", "d1"), ("deleted", "d1")] and last == 3 and not more
    assert changes[0].document is None  # deleted since: its state now is gone, the delete follows
    changes, last, _ = store.changes_after(0, "c", lambda tenant: tenant == "other")
    assert [c.key for c in changes] == ["o1"] and last == 3
    store.upsert_documents(one.id, [doc])
    changes, _, _ = store.changes_after(3, "c", lambda tenant: True)
    back = change_of(change_json(changes[0]))
    assert back == changes[0] and back.document.places[0].section == ("A",) and back.document.file.pages == 3
    assert back.document.file.ocr_pages == (2, 3)
    store.set_peer_cursor("b", "1" * 32, 7)
    store.set_peer_cursor("b", "1" * 32, 5)  # never backwards within one store of the peer
    assert store.peer_cursor("b") == ("1" * 32, 7) and store.journal_head() == 4
    store.set_peer_cursor("b", "2" * 32, 2)  # its disk replaced: counting starts again in its new store
    assert store.peer_cursor("b") == ("2" * 32, 2)


def test_a_copy_of_the_store_is_another_store(tmp_path):
    """A backup restored (on a new disk, or this box) gets its own identity, so the site's other boxes send it
    what it lacks, its own old writes included, and count its journal from the start."""
    from appliance.store import copy_database

    store = Store(tmp_path / "s.sqlite3")
    identity = store.store_id
    assert len(identity) == 32 and store.store_id == identity  # made once, kept
    copy_database(tmp_path / "s.sqlite3", tmp_path / "copy.sqlite3")
    copied = Store(tmp_path / "copy.sqlite3").store_id
    assert len(copied) == 32 and copied != identity


@pytest.mark.parametrize("raw", [b"[]", b"{", b'{"store": "x", "changes": [], "next": 1, "more": false}',
                                 b'{"store": "' + b"a" * 32 + b'", "changes": {}, "next": 1, "more": false}',
                                 b'{"store": "' + b"a" * 32 + b'", "changes": [], "next": "1", "more": false}'])
def test_a_malformed_journal_page_is_refused(raw):
    from appliance.cluster.wire import page_of

    with pytest.raises(WireError):
        page_of(raw)


@pytest.mark.parametrize("value", [
    {"seq": 1, "op": "dropped", "tenant": "t", "partition": "p", "kind": "k", "language": "en", "key": "d",
     "document": None},
    {"seq": "1", "op": "created", "tenant": "t", "partition": "p", "kind": "k", "language": "en", "key": "d",
     "document": None},
    {"seq": 1, "op": "created", "tenant": "t"},
    {"seq": 1, "op": "created", "tenant": "t", "partition": "p", "kind": "k", "language": "en", "key": "d",
     "document": {"chunks": [1, 2]}},
    [],
])
def test_a_malformed_journal_entry_is_refused(value):
    with pytest.raises(WireError):
        change_of(value)


def _entry_with(**changed) -> dict:
    document = {"title": "T", "source": "s", "metadata": {}, "time": None, "content_hash": "h", "chunks": ["a"],
                "places": [[1, None, ["A"]]], "file": {"name": "x.pdf", "sha256": "0" * 64, "format": "pdf",
                                                     "size": 3, "pages": 1, "parser_version": 2}}
    for name, value in changed.items():
        if name.startswith("file_"):
            document["file"] = {**document["file"], name.removeprefix("file_"): value}
        else:
            document[name] = value
    return {"seq": 1, "op": "created", "tenant": "t", "partition": "p", "kind": "k", "language": "en", "key": "d",
            "document": document}


@pytest.mark.parametrize("changed", [
    {"source": None}, {"title": 5}, {"content_hash": None}, {"metadata": "x"}, {"metadata": None},
    {"time": "now"}, {"time": True}, {"places": [[1, None]]}, {"places": [["1", None, []]]},
    {"places": [[1, None, "A"]]}, {"places": [7]}, {"file_name": None}, {"file_format": 3},
    {"file_pages": -1}, {"file_parser_version": "2"}, {"file_size": True}, {"file_ocr_pages": "1"},
    {"file_ocr_pages": [0]}, {"file_ocr_pages": [1, "2"]}, {"file_ocr_pages": list(range(1, 100_002))}])
def test_a_journal_document_with_a_field_of_the_wrong_type_is_refused_not_stored(changed):
    """A peer's null `source` reached SQLite's NOT NULL and stopped replication with a constraint error; every
    field is now checked on the way in, and the error names the document."""
    assert change_of(_entry_with()).document.places == (Place(1, None, ("A",)),)  # the untouched entry is fine
    assert change_of(_entry_with()).document.file.ocr_pages == ()  # a box of an earlier version sends none
    with pytest.raises(WireError, match="document 'd'"):
        change_of(_entry_with(**changed))


def test_journal_change_roundtrip_without_document():
    change = JournalChange(5, "deleted", "t", "p", "default", "en", "k", None)
    assert change_of(change_json(change)) == change


@pytest.mark.skipif(shutil.which("haproxy") is None, reason="Debian's haproxy is not installed (just test installs it)")
def test_https_boxes_are_reached_over_tls_checked_against_the_sites_ca(tmp_path):
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(tmp_path / "ca.key"),
                    "-out", str(tmp_path / "ca.pem"), "-days", "1", "-subj", "/CN=site-ca"], check=True,
                   capture_output=True)
    site = Site((ClusterBox("a", "https://box-a.internal:9000"), ClusterBox("b", "https://127.0.0.1:9001"),
                 ClusterBox("c", "http://127.0.0.1:9002")), "a")
    config = haproxy_config(site, "boxes.toml", "127.0.0.1:8000", None, str(tmp_path / "ca.pem"))
    (tmp_path / "haproxy.cfg").write_text(config)
    check = subprocess.run(["haproxy", "-c", "-f", str(tmp_path / "haproxy.cfg")], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    servers = {line.split()[1]: line for line in config.splitlines() if line.strip().startswith("server ")}
    assert f"ssl verify required ca-file {tmp_path / 'ca.pem'} verifyhost box-a.internal" in servers["a"]
    assert "ssl verify required ca-file" in servers["b"] and "verifyhost" not in servers["b"]  # an IP: no DNS name
    assert "ssl" not in servers["c"]
    default_ca = haproxy_config(site, "boxes.toml", "127.0.0.1:8000")
    assert "ca-file @system-ca" in default_ca


def test_tls_settings_are_checked(tmp_path):
    (tmp_path / "boxes.toml").write_text('[[box]]\nname = "a"\nurl = "https://h:1"\n')
    env = {"APPLIANCE_CLUSTER_BOXES": str(tmp_path / "boxes.toml"), "APPLIANCE_CLUSTER_SELF": "a",
           "APPLIANCE_CLUSTER_SECRET_FILE": "s", "APPLIANCE_CLUSTER_CA_FILE": str(tmp_path / "missing.pem"),
           "APPLIANCE_SERVER_TLS_CERT_FILE": "box.pem"}
    with pytest.raises(ConfigError) as caught:
        load_settings(env=env)
    assert "cluster.ca_file: " in str(caught.value) and "is not a file" in str(caught.value)
    assert "server.tls_cert_file and server.tls_key_file: set both" in str(caught.value)
    (tmp_path / "ca.pem").write_text("-")
    settings = load_settings(env=env | {"APPLIANCE_CLUSTER_CA_FILE": str(tmp_path / "ca.pem"),
                                        "APPLIANCE_SERVER_TLS_KEY_FILE": "box.key"})
    assert settings.cluster.members == (ClusterBox("a", "https://h:1"),) and settings.server.tls_key_file == "box.key"
