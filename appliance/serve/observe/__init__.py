"""What the server tells about itself: Prometheus metrics (`metrics.py`), where a finished request goes
(`telemetry.py`), the last minutes kept for the console (`history.py`), and the box at a glance (`overview.py`)."""
