"""The settings of a site of several boxes behind a load balancer (appliance/cluster/)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True, frozen=True)
class ClusterBox:
    name: str  # what the box is called in the boxes file, its X-Appliance-Box header and HAProxy's server line
    url: str  # how the other boxes and the balancer reach it: http://host:port


@dataclass(slots=True, frozen=True)
class ClusterSettings:
    """Several boxes behind a load balancer (appliance/cluster/): empty `boxes` = a box on its own."""
    boxes: str = ""  # TOML file of [[box]] tables (name, url): every box of the site, the same file on each
    self: str = ""  # this box's name in that file
    secret_file: str = ""  # a secret shared by the boxes (they send it to each other); required with `boxes`
    # An ingest waits this long for the tenant's other box to store it too; past it the ingest is acknowledged
    # with that copy queued (the journal is the outbox) and the peer pulls it when it can
    sync_timeout_s: float = 5.0
    pull_interval_s: float = 1.0  # how often a box asks each peer for what it has not applied yet
    catch_up_timeout_s: float = 300.0  # at boot, how long catching up from the peers may hold /readyz at 503
    # On SIGTERM /readyz says 503 this long before the server stops taking requests, so the balancer's checks
    # move new requests away first; then answers in progress get server.drain_timeout_s
    drain_grace_s: float = 3.0
    # The CA (PEM) that signed the boxes' certificates, for https:// box URLs; empty: the system's CAs
    ca_file: str = ""
    members: tuple[ClusterBox, ...] = ()  # read from the `boxes` file at load (not a setting of its own)
