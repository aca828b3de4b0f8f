"""Several boxes of one site: where each tenant lives (placement.py), its two copies kept by pulling the peers'
journals (replicator.py), and the HAProxy configuration that routes to them (haproxy.py)."""
from .haproxy import haproxy_config
from .placement import SLOTS, Placement, Site, tenant_slot
from .replicator import Copies, ReplicaConflict, Replicator, load_secret
from .wire import STORE_ID, FeedPage, WireError

__all__ = ["SLOTS", "STORE_ID", "Copies", "FeedPage", "Placement", "ReplicaConflict", "Replicator", "Site",
           "WireError", "haproxy_config", "load_secret",
           "tenant_slot"]
