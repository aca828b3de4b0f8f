"""Who gets in, and at what cost: API keys (`keys.py`), the admission middleware (`gate.py`: key -> tenant, rate
limits, requests in progress), fair slots per tenant (`slots.py`), and one connection's costs (`watch.py`)."""
