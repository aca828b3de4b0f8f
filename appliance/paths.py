"""Where model folders live: one rule for every layer (the build writes there; encoders, router and engines read);
making a folder's new entries durable; a file's sha256."""
from __future__ import annotations

import hashlib
import os
from pathlib import Path


class ModelNotFound(FileNotFoundError):
    """No checkpoint folder for a model name."""


def model_folder(models_dir: Path, name: str) -> Path:
    """models_dir/build/<name>: where `appliance models build` puts (or links) the model `name`."""
    return Path(models_dir) / "build" / name


def checkpoint_folder(models_dir: Path, name: str) -> Path:
    """A built model's name (models/build/<name>) or a checkpoint folder (GPU boxes bring their own), resolved."""
    candidates = [model_folder(models_dir, name), Path(name)]
    for folder in candidates:
        if (folder / "config.json").is_file():
            return folder.resolve()
    raise ModelNotFound(f"model {name!r}: no checkpoint (config.json) in {' or '.join(map(str, candidates))}; "
                        "run `appliance models build`")


def fsync_dir(folder: Path) -> None:
    """Make a rename or new file in `folder` durable (the folder's entry list, not only the file's bytes)."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def file_sha256(path: Path) -> str:
    """A file's sha256, read a MiB at a time (model files are hundreds of MB)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()
