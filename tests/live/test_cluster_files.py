"""Replication between real boxes on loopback: a fetched file is checked against the size and sha256 its peer's
journal announced (a tampered peer is a small real server sending wrong bytes), and boxes talk HTTPS with the
site's own CA (a throwaway CA made here), refusing a peer whose certificate another CA signed."""
from __future__ import annotations

import datetime
import hashlib
import ipaddress
import secrets
import threading
import time
from pathlib import Path

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from support import LiveServer, free_port, make_settings

x509 = pytest.importorskip("cryptography.x509")
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from cryptography.x509.oid import NameOID  # noqa: E402

MEMO = b"The pump in hall 3 is serviced every March by the site engineer.\n" * 20
SHA = hashlib.sha256(MEMO).hexdigest()


# -- a throwaway CA and a certificate for 127.0.0.1 ------------------------------------------------------------

def _name(common: str):
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def make_ca(folder: Path, label: str) -> tuple[Path, ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(_name(label)).issuer_name(_name(label))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    path = folder / f"{label}.pem"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path, key, cert


def make_box_cert(folder: Path, ca_key, ca_cert) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(_name("box")).issuer_name(ca_cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    cert_path, key_path = folder / "box.pem", folder / "box.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    key_path.chmod(0o600)
    return cert_path, key_path


# -- a site of two boxes ---------------------------------------------------------------------------------------

def site_files(folder: Path, urls: dict[str, str]) -> tuple[Path, Path]:
    boxes = folder / "boxes.toml"
    boxes.write_text("".join(f'[[box]]\nname = "{name}"\nurl = "{url}"\n\n' for name, url in urls.items()))
    secret = folder / "secret"
    if not secret.exists():
        secret.write_text(secrets.token_hex(32))
        secret.chmod(0o600)
    return boxes, secret


def box_settings(folder: Path, models_dir: Path, boxes: Path, secret: Path, name: str, **env: str):
    data = folder / name
    data.mkdir(exist_ok=True)
    return make_settings(data, models_dir, cluster_boxes=str(boxes), cluster_self=name,
                         cluster_secret_file=str(secret), cluster_pull_interval_s="0.2",
                         cluster_sync_timeout_s="10", **env)


def peer_status(live: LiveServer, secret: Path, peer: str) -> dict:
    reply = httpx.get(f"{live.url}/cluster/status", verify=live.verify,
                      headers={"authorization": f"Bearer {secret.read_text().strip()}"})
    return reply.json()["peers"][peer]


def wait_for(check, timeout: float = 60, seen=lambda: None):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if value := check():
            return value
        time.sleep(0.2)
    raise TimeoutError(f"condition not met: {seen()}")


def documents(live: LiveServer) -> set[str]:
    with live.client() as c:
        reply = c.get("/v1/documents", params={"tenant": "acme", "partition": "docs"})
    return {d["id"] for d in reply.json()["documents"]} if reply.status_code == 200 else set()


# -- a peer that announces one file and sends whatever `body` holds ---------------------------------------------

class FakePeer:
    """A real HTTP server on loopback answering as box `a` would: one journal entry, a document from a file of
    MEMO's size and sha256, and /cluster/files sending `self.body` (wrong bytes while a test says so)."""

    def __init__(self):
        self.body = MEMO
        self.served = 0  # files sent: each refused pull asks again
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        app = Starlette(routes=[Route("/cluster/journal", self.journal), Route("/cluster/files/{sha}", self.file)])
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    async def journal(self, request: Request) -> JSONResponse:
        doc = {"title": "Memo", "source": "memo.txt", "metadata": {}, "time": None, "content_hash": "h-memo",
               "chunks": [MEMO.decode()[:300]], "places": [],
               "file": {"name": "memo.txt", "sha256": SHA, "format": "text", "size": len(MEMO), "pages": None,
                        "parser_version": 1}}
        entry = {"seq": 1, "op": "created", "tenant": "acme", "partition": "docs", "kind": "default",
                 "language": "auto", "key": "memo.txt", "document": doc}
        after = int(request.query_params.get("after", "0"))
        return JSONResponse({"store": "ab" * 16, "changes": [entry] if after < 1 else [], "next": 1, "more": False})

    async def file(self, request: Request) -> Response:
        self.served += 1
        return Response(self.body, media_type="application/octet-stream")

    def __enter__(self) -> "FakePeer":
        self.thread.start()
        wait_for(lambda: self.server.started, 30)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


def test_a_file_not_matching_its_announced_size_and_sha256_is_refused_and_pulled_again(tmp_path, models_dir):
    with FakePeer() as peer:
        port = free_port()
        boxes, secret = site_files(tmp_path, {"a": peer.url, "b": f"http://127.0.0.1:{port}"})
        settings = box_settings(tmp_path, models_dir, boxes, secret, "b")
        blob = settings.files_dir / SHA[:2] / SHA
        altered = MEMO.replace(b"March", b"April")  # the same size, other bytes
        peer.body = altered
        with LiveServer(settings, port=port) as box:
            tampered = wait_for(lambda: peer_status(box, secret, "a")["pull_error"])
            tampered_docs, tampered_blob = documents(box), blob.exists()
            peer.body = MEMO + b"x" * 5_000_000  # past the announced size: read no further than it
            served = peer.served
            wait_for(lambda: peer.served >= served + 2)  # refused and asked again, at least once with this body
            longer = peer_status(box, secret, "a")["pull_error"]
            longer_docs = documents(box)
            peer.body = MEMO  # the peer sends the right file: the next pull applies the entry
            wait_for(lambda: peer_status(box, secret, "a")["applied_from"] == 1,
                     seen=lambda: peer_status(box, secret, "a"))
            with box.client() as c:
                original = c.get("/v1/documents/memo.txt/file", params={"tenant": "acme", "partition": "docs"})
    assert "does not match" in tampered and SHA in tampered, tampered
    assert tampered_docs == set() and not tampered_blob, "nothing of a refused file is stored"
    assert longer is not None and "does not match" in longer and longer_docs == set()
    assert original.status_code == 200 and original.content == MEMO


@pytest.fixture
def tls_site(tmp_path, models_dir):
    ca, ca_key, ca_cert = make_ca(tmp_path, "site-ca")
    other_ca, _, _ = make_ca(tmp_path, "other-ca")
    cert, key = make_box_cert(tmp_path, ca_key, ca_cert)
    port_a, port_b = free_port(), free_port()
    boxes, secret = site_files(tmp_path, {"a": f"https://127.0.0.1:{port_a}", "b": f"http://127.0.0.1:{port_b}"})
    settings_a = box_settings(tmp_path, models_dir, boxes, secret, "a", server_tls_cert_file=str(cert),
                              server_tls_key_file=str(key), cluster_ca_file=str(ca))
    return tmp_path, models_dir, boxes, secret, settings_a, port_a, port_b, ca, other_ca


def test_boxes_replicate_over_https_with_the_sites_ca_and_refuse_another_ca(tls_site):
    folder, models_dir, boxes, secret, settings_a, port_a, port_b, ca, other_ca = tls_site
    with LiveServer(settings_a, port=port_a) as box_a:
        assert box_a.url.startswith("https://")
        with box_a.client() as c:
            written = c.post("/v1/documents", json={"tenant": "acme", "partition": "docs", "documents": [
                {"id": "d1", "text": "The boiler restarts itself after a power cut."}]})
        assert written.status_code == 200, written.text
        # a box that trusts another CA: the pull fails on the certificate, and nothing is stored
        wrong = box_settings(folder, models_dir, boxes, secret, "b", cluster_ca_file=str(other_ca))
        with LiveServer(wrong, port=port_b) as box_b:
            refused = wait_for(lambda: peer_status(box_b, secret, "a")["pull_error"])
            refused_docs = documents(box_b)
        (folder / "b").rename(folder / "b-wrong-ca")
        right = box_settings(folder, models_dir, boxes, secret, "b", cluster_ca_file=str(ca))
        with LiveServer(right, port=port_b) as box_b:
            wait_for(lambda: documents(box_b) == {"d1"})
            error = peer_status(box_b, secret, "a")["pull_error"]
    assert "CERTIFICATE_VERIFY_FAILED" in refused or "certificate verify failed" in refused, refused
    assert refused_docs == set()
    assert error is None
