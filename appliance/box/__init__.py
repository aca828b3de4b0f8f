"""The box's upkeep: the API keys file (`keys_file.py`: its format and the permission rule that the server, `doctor`
and `backup` share; this package's surface, which `serve` reads keys with), `doctor` (`doctor.py`: what would stop
the box from serving), `backup`/`restore` (`backup.py`, with `backup_archive.py` reading a backup as untrusted).
`backup` locks the data folder as the server does (`wiring`), so the package sits above `wiring` and below
`serve`; `backup` and `doctor` are imported inside the CLI commands that run them.
"""
from .keys_file import (ADMIN, Caller, KeysFileError, KeysFileUnreadable, Stamp, hash_key, mode_problem, read_keys,
                        service_group, stamp_of)

__all__ = ["ADMIN", "Caller", "KeysFileError", "KeysFileUnreadable", "Stamp", "hash_key", "mode_problem", "read_keys",
           "service_group", "stamp_of"]
