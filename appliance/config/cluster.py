"""The settings of a site of several boxes behind a load balancer (appliance/cluster/)."""
from __future__ import annotations

from dataclasses import dataclass

from .rules import setting


@dataclass(slots=True, frozen=True)
class ClusterBox:
    name: str  # what the box is called in the boxes file, its X-Appliance-Box header and HAProxy's server line
    url: str  # how the other boxes and the balancer reach it: http://host:port


@dataclass(slots=True, frozen=True)
class ClusterSettings:
    """Several boxes behind a load balancer (appliance/cluster/): empty `boxes` = a box on its own."""
    boxes: str = setting(
        "",
        why="TOML file of [[box]] tables (name, url): every box of the site, the same file on each")
    self: str = setting("", why="this box's name in that file")
    secret_file: str = setting(
        "",
        why="a secret shared by the boxes (they send it to each other); required with `boxes`")
    sync_timeout_s: float = setting(
        5.0, above=0,
        why="An ingest waits this long for the tenant's other box to store it too; past it the ingest is "
            "acknowledged with that copy queued (the journal is the outbox) and the peer pulls it when it can")
    pull_interval_s: float = setting(1.0, above=0, why="how often a box asks each peer for what it has not applied yet")
    catch_up_timeout_s: float = setting(
        300.0, above=0,
        why="at boot, how long catching up from the peers may hold /readyz at 503")
    # 0 or more, checked in load.py only with `boxes` (a box on its own never reads it), so not a bound here
    drain_grace_s: float = setting(
        3.0, unbounded=True,
        why="On SIGTERM /readyz says 503 this long before the server stops taking requests, so the balancer's "
            "checks move new requests away first; then answers in progress get server.drain_timeout_s")
    ca_file: str = setting(
        "",
        why="The CA (PEM) that signed the boxes' certificates, for https:// box URLs; empty: the system's CAs")
    members: tuple[ClusterBox, ...] = ()  # read from the `boxes` file at load (not a setting of its own)
