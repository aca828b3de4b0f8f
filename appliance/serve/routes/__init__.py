"""The HTTP routes, one module per resource; each exports `routes`. A route's `name` is its endpoint label in
metrics and the request log (routes of one resource share it), which the admission middleware reads from here."""
from starlette.routing import Route

from . import admin, answers, cluster, console, documents, files, partitions, search

ROUTES: list[Route] = [*files.routes, *documents.routes, *search.routes, *partitions.routes, *answers.routes,
                     *admin.routes, *console.routes, *cluster.routes]

# What each POST route's body must be sent as (any other Content-Type: 415); JSON unless named here.
BODY_TYPES = {"files": "multipart/form-data"}

__all__ = ["BODY_TYPES", "ROUTES"]
