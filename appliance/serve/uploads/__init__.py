"""Multipart uploads (POST /v1/files): read in linear time (`multipart.py`) within their limits (`reader.py`),
their files on disk within a byte budget while in progress (`spool.py`)."""
