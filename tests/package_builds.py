"""The four packages the package tests install: this build, the same build without the default model ("lite"), a
previous one (another version of the same freeze) and a broken one (its encoder truncated, so the server fails
/readyz). Kept in build/package/test-dist while nothing that goes into them changed.

Only this build carries the default model (3.55 GB of weights; installed and answering in the offline test, its
contents checked). The upgrade, rollback, reinstall and service tests install "lite": the same frozen tree and
version with SmolLM2 (the default before), which their settings name as an admin of the previous version had it.
Those paths do not depend on the weights, and each install of them cost CI ~95 s (5.8 GB unpacked and hashed twice)
against ~30 s for lite's 1 GB. The previous version ships SmolLM2 too; the broken one no generation model at all.

Building them takes a few minutes of one core (the freeze, then four packs), so conftest.py starts this
module as a process of its own, at the lowest CPU and I/O priority, as soon as a session has collected the package
tests; the tests before them leave enough idle CPU for it, and the `builds` fixture waits for it.

    python tests/package_builds.py      builds what is missing, exit status 0 when all four are there
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from support import ROOT
from appliance.config.sections import DEFAULT_MODEL

OUT = ROOT / "build" / "package" / "test-dist"
LOG = ROOT / "build" / "package" / "test-dist.log"
TOOLS = ("ip", "strace", "setpriv", "tar", "gzip", "sha256sum", "gpg")
MISSING_TOOLS = [tool for tool in TOOLS if shutil.which(tool) is None]
CAN_RUN = os.geteuid() == 0 and not MISSING_TOOLS and sys.platform == "linux"
BACKGROUND = pytest.StashKey["Background"]()  # the session's build, kept on pytest's config
sys.path.insert(0, str(ROOT / "packaging"))
from freeze import freeze_key  # noqa: E402


def named(version: str) -> dict:
    return {"this": OUT / f"rag-appliance-{version}-cpu.run", "lite": OUT / "lite" / f"rag-appliance-{version}-cpu.run",
            "previous": OUT / "rag-appliance-0.0.9-cpu.run", "broken": OUT / "rag-appliance-9.9.9-broken-cpu.run",
            "version": version}


def inputs_key(models_dir: Path) -> str:
    """What the builds depend on: the freeze's own key, the packaging files, the manifests with their notices and the
    built models."""
    key = hashlib.sha256(freeze_key("cpu").encode())
    inputs = [*(ROOT / "packaging").glob("*"), *models_dir.glob("*.toml"), *(models_dir / "licences").glob("*"),
              *(models_dir / "build").rglob("*")]
    for path in sorted(inputs):
        if path.is_file() and path.suffix != ".lock":  # a build lock is touched by every test session's models build
            key.update(path.name.encode() + str(path.stat().st_size).encode() + str(path.stat().st_mtime).encode())
    return key.hexdigest()


def _built_key() -> str | None:
    return (OUT / "key").read_text() if (OUT / "key").exists() else None


def up_to_date(models_dir: Path) -> bool:
    return _built_key() == inputs_key(models_dir)


def build_all(models_dir: Path) -> None:
    key = inputs_key(models_dir)
    if _built_key() == key:
        return
    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir(parents=True)
    # this build's payload stored, not compressed (--level 0, still a gzip stream): the default model's 3.55 GB of
    # bf16 weights shrink only 1.35x at gzip -1, which took 160 s more to pack than storing and ~15 s more per install
    # (5.5 GiB on disk instead of 3.4). The other two, without those weights, shrink 2.2x at -1 and install as fast
    # as stored. What the packages do does not depend on the level.
    _build(["--out", str(OUT), "--level", "0"])
    tree = ROOT / "build" / "package" / "dist" / "appliance"
    with tempfile.TemporaryDirectory(prefix="test-models-") as work:
        previous = _models_without(models_dir, Path(work) / "previous", DEFAULT_MODEL)
        _build(["--tree", str(tree), "--level", "1", "--models", str(previous), "--out", str(OUT / "lite")])
        _build(["--tree", str(tree), "--version", "0.0.9", "--level", "1", "--models", str(previous),
                "--out", str(OUT)])
        broken = _models_without(models_dir, Path(work) / "broken", DEFAULT_MODEL, "smollm2")
        onnx = broken / "build" / "minilm" / "model.onnx"
        data = onnx.read_bytes()
        onnx.unlink()  # a new file: the link shares the real model's bytes
        onnx.write_bytes(data[: len(data) // 3])
        _build(["--tree", str(tree), "--version", "9.9.9-broken", "--level", "1", "--models", str(broken),
                "--out", str(OUT)])
    (OUT / "key").write_text(key)


def _models_without(models_dir: Path, dest: Path, *dropped: str) -> Path:
    """A models folder of hard links to `models_dir` without the named models (manifest and built folder)."""
    shutil.copytree(models_dir, dest, copy_function=os.link,
                    ignore=shutil.ignore_patterns("*.lock", *(f"{name}.toml" for name in dropped)))
    for name in dropped:
        shutil.rmtree(dest / "build" / name)
    return dest


def _build(args: list[str]) -> None:
    done = subprocess.run([sys.executable, str(ROOT / "packaging" / "build.py"), *args], capture_output=True,
                          text=True, timeout=3000)
    if done.returncode != 0:
        raise RuntimeError(f"packaging/build.py {' '.join(args)} failed:\n"
                           f"{done.stdout[-3000:]}{done.stderr[-3000:]}")
    print(done.stdout.strip(), flush=True)


class Background:
    """build_all in a process of its own at idle priority; `wait` returns when it is done."""

    def __init__(self) -> None:
        LOG.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(LOG, "wb")
        idle = ["nice", "-n", "19", *(["ionice", "-c", "3"] if shutil.which("ionice") else [])]
        self._process = subprocess.Popen([*idle, sys.executable, __file__],
                                         stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True,
                                         cwd=ROOT)

    def wait(self, timeout: float = 3600) -> None:
        code = self._process.wait(timeout)
        self._log.close()
        assert code == 0, LOG.read_text(errors="replace")[-6000:]

    def stop(self) -> None:
        if self._process.poll() is None:
            os.killpg(self._process.pid, 9)
            self._process.wait(30)
        self._log.close()


if __name__ == "__main__":
    from appliance.models import build_models

    build_models(ROOT / "models", log=lambda *_: None)  # what is missing; locked, so safe beside pytest's own call
    build_all(ROOT / "models")
