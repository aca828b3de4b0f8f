"""HTTP interface: the Starlette app (`app.py`), what every route shares (`edge.py`), its routes by resource
(`routes/`), admission (`admission/`), request bodies each declared once (`api/requests.py`) and the OpenAPI
document (`api/`), errors and one serialiser per response object (`http/`), uploads (`uploads/`), metrics and
telemetry (`observe/`)."""
from .app import create_app, server_options

__all__ = ["create_app", "server_options"]
