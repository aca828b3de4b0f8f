"""The HAProxy configuration for a site: one backend per (home, backup) pair of boxes, for the slots they hold.

HAProxy computes a request's tenant (X-Tenant, else the API key's through a map of key hashes), its slot with
the same CRC-32 as the boxes, and sends it to the backend of that slot's pair: the home box serves it, and the
`backup` server (the slot's backup box) takes over while the home fails /readyz (down, starting, catching up,
or draining after SIGTERM), so a tenant moves to the one other box that holds its documents and nowhere else.
"""
from __future__ import annotations

import ipaddress
from collections import defaultdict
from pathlib import Path
from urllib.parse import urlsplit

from ..config import ClusterBox
from .placement import SLOTS, Site

TEMPLATE = Path(__file__).with_name("haproxy.cfg.in")
SLOTS_PER_LINE = 48  # HAProxy reads at most 64 words on a line
CHECK = "check inter 1s fall 2 rise 2"  # down within ~2 s of a box failing; back after two good checks


def haproxy_config(site: Site, boxes_file: str, bind: str, keys_map: str | None = None,
                   ca_file: str | None = None) -> str:
    """The configuration text; `keys_map`: a map file of key sha256 -> tenant (`appliance cluster keys-map`);
    `ca_file`: the CA that signed https:// boxes' certificates (None: the system's CAs)."""
    pairs: dict[tuple[ClusterBox, ClusterBox | None], list[int]] = defaultdict(list)
    for slot in range(SLOTS):
        placed = site.slot_placement(slot)
        pairs[placed.home, placed.backup].append(slot)
    ordered = sorted(pairs.items(), key=lambda item: (item[0][0].name, item[0][1].name if item[0][1] else ""))
    rules = [f"    use_backend {_backend_name(*pair)} if {{ var(txn.slot) -m int {' '.join(map(str, part))} }}"
             for pair, slots in ordered for part in _parts(slots, SLOTS_PER_LINE)]
    keys_rule = ""
    if keys_map:
        keys_rule = ("    http-request set-var(txn.tenant) req.hdr(authorization),word(2,' '),sha2(256),hex,lower,"
                     f"map({keys_map}) if !{{ var(txn.tenant) -m found }} {{ req.hdr(authorization) -m found }}\n")
    values = {"@BOXES_FILE@": boxes_file, "@BIND@": bind, "@SLOTS@": str(SLOTS), "@KEYS_RULE@": keys_rule,
              "@SLOT_RULES@": "\n".join(rules), "@FIRST@": _backend_name(*ordered[0][0]),
              "@BACKENDS@": "\n".join(_backend(*pair, ca_file) for pair, _ in ordered)}
    text = TEMPLATE.read_text(encoding="utf-8")
    for key, value in values.items():
        text = text.replace(key, value)
    return text


def _parts(items: list[int], size: int) -> list[list[int]]:
    return [items[i:i + size] for i in range(0, len(items), size)]


def keys_map(entries: list[tuple[str, str]]) -> str:
    """HAProxy's map file of API key sha256 -> tenant, from the keys file's (sha256, tenant) entries."""
    # the keys file writes "sha256:<hex>"; HAProxy's sha2(256),hex,lower gives the bare hex
    return "".join(f"{sha256.lower().removeprefix('sha256:')} {tenant}\n" for sha256, tenant in sorted(entries))


def _backend_name(home: ClusterBox, backup: ClusterBox | None) -> str:
    return f"home_{home.name}" + (f"_backup_{backup.name}" if backup else "")


def _backend(home: ClusterBox, backup: ClusterBox | None, ca_file: str | None) -> str:
    lines = [f"backend {_backend_name(home, backup)}",
             # HTTP/1.1 needs a Host: `localhost` is one every box answers, whatever its other names
             "    option httpchk",
             "    http-check send meth GET uri /readyz ver HTTP/1.1 hdr Host localhost",
             "    http-check expect status 200",
             f"    server {home.name} {_address(home)} {CHECK}{_tls(home, ca_file)}"]
    if backup is not None:
        lines.append(f"    server {backup.name} {_address(backup)} {CHECK}{_tls(backup, ca_file)} backup")
    return "\n".join(lines) + "\n"


def _tls(box: ClusterBox, ca_file: str | None) -> str:
    """An https:// box is reached over TLS, its certificate checked (and its /readyz checks too): against the
    site's CA, and for the URL's host name."""
    parts = urlsplit(box.url)
    if parts.scheme != "https":
        return ""
    tls = f" ssl verify required ca-file {ca_file or '@system-ca'}"
    # HAProxy checks a name against the certificate's DNS names; an IP address has none to check against
    return tls if _is_ip(parts.hostname or "") else f"{tls} verifyhost {parts.hostname}"


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return False


def _address(box: ClusterBox) -> str:
    parts = urlsplit(box.url)
    return f"{parts.hostname}:{parts.port or (443 if parts.scheme == 'https' else 80)}"
