"""The `appliance` command: the argument parser and the commands that run the server, ingest, search and ask
(`commands.py`), the box's upkeep (`box.py`: models, doctor, backup, restore, ready), local and remote ingest of
folders (`ingest.py`), `eval ...` (`eval.py`) and `cluster ...` (`cluster.py`). The top layer: it may import any
package, and nothing imports it but `__main__` and the console script. Only light modules are imported at module
level (vLLM re-imports the main module in its engine processes); the rest is imported inside each command.
"""
from .commands import main

__all__ = ["main"]
