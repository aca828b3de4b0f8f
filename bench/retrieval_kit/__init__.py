"""Pieces of the retrieval benchmark (`bench/retrieval.py`): data and caches, our appliance, the peers, scale."""
