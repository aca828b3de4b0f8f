"""The API's request bodies: each declared once (`requests.py`, by way of `declare.py`), validated (`validation.py`)
and parsed off the event loop within its route's limit (`bodies.py`), and the OpenAPI document (`openapi.py`)."""
