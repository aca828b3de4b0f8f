"""What the frozen tree holds, by Python distribution: read from PyInstaller's own tables of contents (every
module, extension and data file it collected, with the path it came from), matched against each installed
distribution's RECORD. A distribution whose metadata rode along but none of whose files did (an excluded
package) is not bundled, so the SBOM lists what ships, not what the build venv happens to hold."""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from dependency_tree import describe

_LICENCE_FILE = re.compile(r"^(LICEN[CS]E|COPYING|NOTICE|AUTHORS)", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class BundledPackage:
    name: str
    version: str
    licence: str
    licence_files: tuple[Path, ...]


def collected_sources(work: Path) -> set[str]:
    """The absolute source paths of everything PyInstaller put in the tree (modules in the PYZ, the rest)."""
    sources: set[str] = set()
    for toc in ("PYZ-00.toc", "COLLECT-00.toc"):
        text = (work / "work" / "appliance" / toc).read_text()
        entries = ast.literal_eval(text)
        entries = entries[1] if toc.startswith("PYZ") else entries[0]
        sources.update(str(Path(source).resolve()) for _, source, _ in entries if source)
    return sources


def bundled_packages(work: Path) -> list[BundledPackage]:
    """Every installed distribution with at least one non-metadata file in the frozen tree."""
    sources = collected_sources(work)
    found: dict[str, BundledPackage] = {}
    for dist in metadata.distributions():
        files = [f for f in dist.files or [] if ".dist-info/" not in f.as_posix() and ".egg-info/" not in f.as_posix()]
        paths = {str(Path(dist.locate_file(f)).resolve()) for f in files}
        if not paths & sources and not _is_editable_root(dist, sources):
            continue
        described = describe(dist)
        found.setdefault(described.name.lower(), BundledPackage(described.name, described.version,
                                                                 described.licence, _licence_files(dist)))
    return sorted(found.values(), key=lambda p: p.name.lower())


def _is_editable_root(dist: metadata.Distribution, sources: set[str]) -> bool:
    """The project itself is installed editable: its RECORD names no module files, the tree holds appliance/."""
    return dist.metadata["Name"] == "rag-appliance" and any("/appliance/" in s for s in sources)


def is_licence_file(name: str) -> bool:
    return bool(_LICENCE_FILE.match(name)) and name.lower().rsplit(".", 1)[-1] not in ("py", "pyc", "so")


def _licence_files(dist: metadata.Distribution) -> tuple[Path, ...]:
    """Licence texts a distribution ships: in its .dist-info (PEP 639's licenses/ included) or at its top level."""
    picked = []
    for f in dist.files or []:
        if is_licence_file(f.name):
            path = Path(dist.locate_file(f))
            if path.is_file():
                picked.append(path)
    return tuple(picked)
