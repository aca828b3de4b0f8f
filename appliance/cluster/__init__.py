"""Several boxes of one site: where each tenant lives (placement.py), its two copies kept by pulling the peers'
journals (replicator.py), and the HAProxy configuration that routes to them (haproxy.py)."""
from .haproxy import haproxy_config
from .placement import SLOTS, Placement, Site, tenant_slot
from .replicator import Copies, Replicator, load_secret
from .wire import WireError

__all__ = ["SLOTS", "Copies", "Placement", "Replicator", "Site", "WireError", "haproxy_config", "load_secret",
           "tenant_slot"]
