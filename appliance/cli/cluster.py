"""`appliance cluster config|keys-map|status`: a site of several boxes behind HAProxy (appliance/cluster/)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from ..config import ConfigError, Settings, load_boxes


def add_cluster_commands(commands) -> None:
    cluster = commands.add_parser("cluster", help="several boxes behind HAProxy").add_subparsers(
        dest="what", required=True)
    config = cluster.add_parser("config", help="print the HAProxy configuration for the boxes file")
    config.add_argument("--boxes", type=Path, help="the boxes file (default: cluster.boxes)")
    config.add_argument("--port", type=int, default=8080, help="the port HAProxy listens on (default 8080)")
    config.add_argument("--bind", default="", help="the address HAProxy listens on (default: every address)")
    config.add_argument("--keys-map", help="HAProxy map file of key hashes -> tenants (see `cluster keys-map`), "
                        "so requests with a tenant's API key and no X-Tenant are routed by the key's tenant")
    config.add_argument("--ca-file", help="the CA (PEM) HAProxy checks https:// boxes' certificates against "
                        "(default: cluster.ca_file, else the system's CAs)")
    config.set_defaults(run=_config)
    keys_map = cluster.add_parser("keys-map", help="print the map file of API key sha256 -> tenant for HAProxy")
    keys_map.add_argument("--keys", type=Path, help="the keys file (default: admission.keys_file)")
    keys_map.set_defaults(run=_keys_map)
    status = cluster.add_parser("status", help="ask every box: ready, where each tenant lives, how far behind "
                                "each copy is")
    status.add_argument("--json", action="store_true")
    status.set_defaults(run=_status)


def _boxes_file(settings: Settings, given: Path | None) -> Path:
    path = given or (Path(settings.cluster.boxes) if settings.cluster.boxes else None)
    if path is None:
        sys.exit("appliance: name the boxes file (--boxes, or cluster.boxes in the settings)")
    return path


def _config(settings: Settings, args) -> None:
    from ..cluster import Site, haproxy_config

    path = _boxes_file(settings, args.boxes)
    try:
        boxes = load_boxes(path)
    except ConfigError as exc:
        sys.exit(f"appliance: {exc}")
    if not 0 < args.port < 65536:
        sys.exit("appliance: --port must be from 1 to 65535")
    ca_file = args.ca_file or settings.cluster.ca_file or None
    print(haproxy_config(Site(boxes, boxes[0].name), str(path), f"{args.bind}:{args.port}", args.keys_map,
                         ca_file), end="")


def _keys_map(settings: Settings, args) -> None:
    from ..cluster.haproxy import keys_map
    from ..serve.admission.keys import ApiKeys

    path = args.keys or (Path(settings.admission.keys_file) if settings.admission.keys_file else None)
    if path is None:
        sys.exit("appliance: name the keys file (--keys, or admission.keys_file in the settings)")
    print(keys_map(ApiKeys.load(path).tenant_hashes()), end="")


def _status(settings: Settings, args) -> None:
    import httpx

    from ..cluster import load_secret
    from ..cluster.wire import box_tls

    c = settings.cluster
    if not c.boxes:
        sys.exit("appliance: cluster.boxes is not set: this box is not part of a site")
    secret = load_secret(c.secret_file)
    report = {}
    with httpx.Client(timeout=10, trust_env=False, headers={"authorization": f"Bearer {secret}"},
                      verify=box_tls(c.ca_file)) as client:
        for box in c.members:
            try:
                ready = client.get(f"{box.url}/readyz").json().get("status")
                reply = client.get(f"{box.url}/cluster/status")
                report[box.name] = {"ready": ready, **(reply.json() if reply.status_code == 200 else {})}
            except (httpx.HTTPError, ValueError) as exc:
                report[box.name] = {"ready": "unreachable", "error": f"{type(exc).__name__}: {exc}"}
    if args.json:
        print(json.dumps(report, indent=2))
        return
    for line in status_lines(report):
        print(line)


def status_lines(report: dict) -> list[str]:
    """Boxes, then each tenant: its home and backup, its documents on each box, and what each copy still lacks."""
    lines = [f"{name:<16} {box['ready']:<12} journal {box.get('journal_head', '?')}" for name, box in report.items()]
    tenants = sorted({t for box in report.values() for t in box.get("tenants", {})})
    lines.append("")
    lines.append(f"{'tenant':<20} {'home':<12} {'backup':<12} documents (behind) per box")
    for tenant in tenants:
        seen = {name: box["tenants"][tenant] for name, box in report.items() if tenant in box.get("tenants", {})}
        first = next(iter(seen.values()))
        copies = []
        for name, info in seen.items():
            behind = sum((other.get("peers", {}).get(name, {}).get("pending") or {}).get(tenant, 0)
                         for other in report.values())
            copies.append(f"{name} {info['documents']} ({behind})")
        lines.append(f"{tenant:<20} {first['home']:<12} {first['backup'] or '-':<12} {', '.join(copies)}")
    return lines
