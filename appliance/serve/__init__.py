"""HTTP interface: the Starlette app (`app.py`), its routes by resource (`routes/`), admission, typed request
bodies (`requests.py`), one serialiser per response object (`responses.py`), metrics and telemetry."""
from .app import create_app, server_options

__all__ = ["create_app", "server_options"]
