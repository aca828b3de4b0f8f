"""The HTTP routes, one module per resource; each exports `routes`. A route's `name` is its endpoint label in
metrics and the request log (routes of one resource share it), which the admission middleware reads from here."""
from starlette.routing import Route

from . import admin, answers, documents, search

ROUTES: list[Route] = [*documents.routes, *search.routes, *answers.routes, *admin.routes]

__all__ = ["ROUTES"]
