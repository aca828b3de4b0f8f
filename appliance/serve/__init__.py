"""HTTP interface: Starlette app with the ingest, delete, search, health and OpenAPI routes."""
from .app import create_app

__all__ = ["create_app"]
