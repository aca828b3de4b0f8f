"""The installer (packaging/installer.sh) on a tiny package: the same header and packing as `just package`
(build.pack, stage.write_checksums, stage.unit_template), a payload of a few files and a launcher that only
answers `ready`. Seconds, where the real packages take a quarter of an hour (tests/test_package*.py)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support import ROOT

sys.path.insert(0, str(ROOT / "packaging"))
from build import pack, sign  # noqa: E402
from stage import unit_template, write_checksums  # noqa: E402

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the installer is for Linux boxes")
LAUNCHER = "#!/bin/sh\n# a stand-in for the launcher: `ready` succeeds, nothing serves\nexit 0\n"


def _package(folder: Path, version: str = "1.0.0", marker: str = "good", level: int = 1,
             large: bool = False, lie_about: str = "") -> Path:
    """large: with a file over the installer's 16 MiB line (hashed on its own); lie_about: that file's line in
    SHA256SUMS is wrong (the payload's own hash, taken after, still matches)."""
    stage = folder / f"stage-{version}-{marker}"
    (stage / "bin").mkdir(parents=True)
    (stage / "bin" / "appliance").write_text(LAUNCHER)
    (stage / "bin" / "appliance").chmod(0o755)
    (stage / "etc").mkdir()
    shutil.copy(ROOT / "packaging" / "appliance.toml.in", stage / "etc" / "appliance.toml.in")
    (stage / "etc" / "rag-appliance.service").write_text(unit_template("cpu"))
    (stage / "models").mkdir()
    (stage / "models" / "marker.txt").write_text(marker)
    (stage / "VERSION").write_text(f"{version} cpu\n")
    if large:
        (stage / "models" / "weights.bin").write_bytes(os.urandom(17 << 20))
    write_checksums(stage)
    if lie_about:
        sums = stage / "SHA256SUMS"
        sums.write_text(re.sub(rf"^[0-9a-f]{{64}}(  {re.escape(lie_about)})$", "0" * 64 + r"\1", sums.read_text(),
                               flags=re.M))
        assert "0" * 64 in sums.read_text()
    folder.mkdir(parents=True, exist_ok=True)
    run_file = pack(stage, folder / f"rag-appliance-{version}-{marker}.run", version, "cpu", level)
    shutil.rmtree(stage)
    return run_file


def _sh(package: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", str(package), *args], capture_output=True, text=True, timeout=120, env=env)


def _header_bytes(package: Path) -> int:
    data = package.read_bytes()
    start = data.index(b"HEADER_BYTES=") + len(b"HEADER_BYTES=")
    return int(data[start:data.index(b"\n", start)])


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny-packages")
    # "stored": a payload packed at level 0 (uncompressed gzip blocks), as the package tests pack this version
    return {"good": _package(folder), "evil": _package(folder, marker="evil"),
            "stored": _package(folder, marker="stored", level=0), "folder": folder}


@pytest.mark.parametrize("kind", ["good", "stored"])
def test_a_tiny_package_installs_writes_settings_and_uninstalls(packages, tmp_path, kind):
    prefix = tmp_path / "opt"
    done = _sh(packages[kind], "install", "--prefix", str(prefix), "--no-service", "--port", "8123")
    assert done.returncode == 0, done.stderr
    assert os.readlink(prefix / "current") == "1.0.0"
    assert (prefix / "current" / "models" / "marker.txt").read_text() == kind
    settings = (prefix / "etc" / "appliance.toml").read_text()
    assert f'data_dir = "{prefix}/data"' in settings and "port = 8123" in settings
    assert not list(prefix.glob(".incoming*"))
    removed = _sh(packages[kind], "uninstall", "--prefix", str(prefix), "--no-service")
    assert removed.returncode == 0 and not (prefix / "1.0.0").exists(), removed.stderr
    assert (prefix / "etc" / "appliance.toml").exists()  # kept without --purge


def test_the_file_is_read_once_so_a_payload_swapped_after_the_check_is_not_installed(packages, tmp_path):
    """An attacker (or a copy still arriving) replaces the payload once its hash was taken: reading the file a
    second time to unpack would install the new bytes, which carry their own consistent SHA256SUMS."""
    package = tmp_path / "pkg.run"
    shutil.copy(packages["good"], package)
    header = package.read_bytes()[:_header_bytes(package)]
    swapped = tmp_path / "swapped.run"  # the good header (and hash) in front of the evil payload
    swapped.write_bytes(header + packages["evil"].read_bytes()[_header_bytes(packages["evil"]):])
    tools = tmp_path / "bin"
    tools.mkdir()
    # the hasher reading a stream (the payload's hash: openssl's where installed, else sha256sum's) swaps the file
    # once it has read everything
    for tool, streaming in (("sha256sum", "$# -eq 0"), ("openssl", '$# -eq 3 ] && [ "$1" = dgst')):
        real = shutil.which(tool)
        if real is None:
            continue
        (tools / tool).write_text(f"""#!/bin/sh
if [ {streaming} ]; then
    {real} "$@"; status=$?
    cp {swapped} {package}.new && mv {package}.new {package}
    exit $status
fi
exec {real} "$@"
""")
        (tools / tool).chmod(0o755)
    prefix = tmp_path / "opt"
    env = {**os.environ, "PATH": f"{tools}:{os.environ['PATH']}"}
    done = _sh(package, "install", "--prefix", str(prefix), "--no-service", env=env)
    assert package.read_bytes() == swapped.read_bytes(), "the swap happened"
    assert done.returncode == 0, done.stderr
    assert (prefix / "current" / "models" / "marker.txt").read_text() == "good"


def test_a_damaged_payload_is_refused_and_its_staging_folder_removed(packages, tmp_path):
    damaged = tmp_path / "damaged.run"
    shutil.copy(packages["good"], damaged)
    with open(damaged, "r+b") as f:
        f.seek(_header_bytes(damaged) + (damaged.stat().st_size - _header_bytes(damaged)) // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    fresh = tmp_path / "fresh" / "opt"
    done = _sh(damaged, "install", "--prefix", str(fresh), "--no-service")
    assert done.returncode == 2 and "damaged" in done.stderr and "nothing was written" in done.stderr, done.stderr
    assert not (tmp_path / "fresh").exists()  # the folders it made for the staging folder are gone too
    upgrade = tmp_path / "opt"
    upgrade.mkdir()
    (upgrade / "kept").write_text("x")
    done = _sh(damaged, "install", "--prefix", str(upgrade), "--no-service")
    assert done.returncode == 2 and sorted(p.name for p in upgrade.iterdir()) == ["kept"], done.stderr
    assert _sh(damaged, "verify").returncode == 2
    assert _sh(packages["good"], "verify").returncode == 0


def test_a_truncated_package_is_refused_and_a_service_install_needs_a_running_systemd(packages, tmp_path):
    truncated = tmp_path / "truncated.run"
    shutil.copy(packages["good"], truncated)
    os.truncate(truncated, _header_bytes(truncated) + (truncated.stat().st_size - _header_bytes(truncated)) // 2)
    prefix = tmp_path / "opt"
    done = _sh(truncated, "install", "--prefix", str(prefix), "--no-service")
    assert done.returncode == 2 and "damaged" in done.stderr and not prefix.exists(), done.stderr
    if not Path("/run/systemd/system").is_dir():  # a service install where systemd is not running (a container,
        # systemctl installed or not) says so and writes nothing
        done = _sh(packages["good"], "install", "--prefix", str(prefix))
        assert done.returncode == 1 and "systemd is not running" in done.stderr and "--no-service" in done.stderr
        assert not prefix.exists()


def _without_openssl(tmp_path: Path) -> dict:
    """An environment whose PATH has every tool of the system's but openssl: the installer hashes with sha256sum."""
    tools = tmp_path / "no-openssl"
    tools.mkdir()
    for folder in ("/usr/local/bin", "/usr/bin", "/bin", "/usr/sbin", "/sbin"):
        for tool in Path(folder).glob("*") if Path(folder).is_dir() else ():
            if tool.name != "openssl" and not (tools / tool.name).exists():
                (tools / tool.name).symlink_to(tool)
    return {**os.environ, "PATH": str(tools)}


@pytest.mark.parametrize("hasher", ["openssl", "sha256sum"])
def test_unpacked_files_are_checked_against_sha256sums_large_and_small(packages, tmp_path, hasher):
    if hasher == "openssl" and shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    env = _without_openssl(tmp_path) if hasher == "sha256sum" else None
    folder = packages["folder"]
    large = _package(folder, marker="large", large=True)
    prefix = tmp_path / "opt"
    done = _sh(large, "install", "--prefix", str(prefix), "--no-service", env=env)
    assert done.returncode == 0 and (prefix / "current" / "models" / "weights.bin").stat().st_size == 17 << 20, \
        done.stderr
    for lie in ("models/weights.bin", "models/marker.txt"):  # the large file, hashed alone; a small one
        lying = _package(folder / lie.replace("/", "-"), version="1.0.1", marker="lying", large=True, lie_about=lie)
        done = _sh(lying, "install", "--prefix", str(prefix), "--no-service", env=env)
        assert done.returncode == 1 and "do not match SHA256SUMS" in done.stderr, done.stderr
        assert os.readlink(prefix / "current") == "1.0.0" and not (prefix / "1.0.1").exists()
        assert not list(prefix.glob(".incoming*"))


@pytest.fixture
def gnupg_env(tmp_path):
    """A GnuPG home of its own holding a release key; the agent gpg starts for it is stopped afterwards."""
    if shutil.which("gpg") is None:
        pytest.skip("gpg is not installed")
    home = tmp_path / "gnupg"
    home.mkdir(mode=0o700)
    env = {**os.environ, "GNUPGHOME": str(home)}
    subprocess.run(["gpg", "--batch", "--passphrase", "", "--quick-gen-key", "release@appliance.invalid",
                    "default", "default", "never"], env=env, check=True, capture_output=True)
    yield env
    if shutil.which("gpgconf"):
        subprocess.run(["gpgconf", "--kill", "all"], env=env, capture_output=True)


def test_a_signature_beside_the_package_is_checked_with_gpg(packages, tmp_path, gnupg_env):
    package = tmp_path / "signed.run"
    shutil.copy(packages["good"], package)
    sign(package, "release@appliance.invalid", gnupg_env)
    prefix = tmp_path / "opt"
    done = _sh(package, "install", "--prefix", str(prefix), "--no-service", env=gnupg_env)
    assert done.returncode == 0 and "signature" in done.stderr and "is good" in done.stderr, done.stderr
    assert _sh(package, "verify", env=gnupg_env).returncode == 0

    other = tmp_path / "other.run"  # a signature of something else: as if the package were changed after signing
    other.write_bytes(b"something else")
    sign(other, "release@appliance.invalid", gnupg_env).replace(package.with_name(package.name + ".asc"))
    again = tmp_path / "again"
    done = _sh(package, "install", "--prefix", str(again), "--no-service", env=gnupg_env)
    assert done.returncode == 2 and "does not verify" in done.stderr, done.stderr
    assert not again.exists()
    assert _sh(package, "verify", env=gnupg_env).returncode == 2

    sign(package, "release@appliance.invalid", gnupg_env)
    stranger = {**gnupg_env, "GNUPGHOME": str(tmp_path / "empty-gnupg")}  # a keyring without the release key
    Path(stranger["GNUPGHOME"]).mkdir(mode=0o700)
    done = _sh(package, "install", "--prefix", str(again), "--no-service", env=stranger)
    assert done.returncode == 2 and "does not verify" in done.stderr and not again.exists(), done.stderr
    subprocess.run(["gpgconf", "--kill", "all"], env=stranger, capture_output=True)


@pytest.mark.parametrize("folder", ["relative/opt", "/a b", "/a'b", '/a"b', "/a\\b", "/a%b", "/a\nb", "/a|b", "/a&b",
                                    "/x/../etc", "/a$(id)"])
@pytest.mark.parametrize("option", ["--prefix", "--data-dir"])
def test_unsafe_folders_are_refused_before_anything_is_written(packages, tmp_path, option, folder):
    """Inside tmp_path (an installer without the checks would install there); "relative/opt" from it."""
    prefix = tmp_path / "opt"
    args = ["--prefix", str(prefix)] if option == "--data-dir" else []
    value = folder if folder.startswith("relative") else f"{tmp_path}{folder}"
    done = subprocess.run(["sh", str(packages["good"]), "install", "--no-service", *args, option, value],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 1 and option in done.stderr, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == [], "nothing was written"


@pytest.mark.parametrize("option, value", [("--port", "80; x"), ("--port", "70000"), ("--memory-max", "4G\nUser=root"),
                                           ("--memory-max", "101%"), ("--memory-max", "lots"),
                                           ("--ready-timeout", "1e9")])
def test_unsafe_numbers_are_refused(packages, tmp_path, option, value):
    done = _sh(packages["good"], "install", "--prefix", str(tmp_path / "opt"), "--no-service", option, value)
    assert done.returncode == 1 and option in done.stderr and "unknown option" not in done.stderr, done.stderr
    assert not (tmp_path / "opt").exists()


def _installed(packages, tmp_path: Path, data: Path) -> Path:
    prefix = tmp_path / "opt"
    done = _sh(packages["good"], "install", "--prefix", str(prefix), "--no-service", "--data-dir", str(data))
    assert done.returncode == 0, done.stderr
    return prefix


def test_purge_refuses_a_folder_that_is_not_the_appliances(packages, tmp_path):
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "thesis.tex").write_text("years of work")
    prefix = _installed(packages, tmp_path, precious)
    done = _sh(packages["good"], "uninstall", "--prefix", str(prefix), "--no-service", "--data-dir", str(precious),
               "--purge")
    assert done.returncode == 1 and "does not look like rag-appliance's" in done.stderr, done.stderr
    assert (precious / "thesis.tex").exists() and (prefix / "current").exists()  # refused before anything went


def test_purge_refuses_system_folders(packages, tmp_path):
    """Through a link, so that an installer without the check would delete the link and not /usr."""
    link = tmp_path / "usr-link"
    link.symlink_to("/usr")
    prefix = _installed(packages, tmp_path, tmp_path / "data")
    done = _sh(packages["good"], "uninstall", "--prefix", str(prefix), "--no-service", "--data-dir", str(link),
               "--purge")
    assert done.returncode == 1 and "refuses to delete /usr (a system folder)" in done.stderr, done.stderr
    assert link.is_symlink() and (prefix / "current").exists()


def test_purge_removes_the_appliances_data_and_settings(packages, tmp_path):
    data = tmp_path / "data"
    prefix = _installed(packages, tmp_path, data)
    data.mkdir()
    (data / "store.sqlite3").write_text("")
    (data / "files").mkdir()
    done = _sh(packages["good"], "uninstall", "--prefix", str(prefix), "--no-service", "--data-dir", str(data),
               "--purge")
    assert done.returncode == 0 and "--purge" in done.stderr, done.stderr
    assert not data.exists() and not prefix.exists()


def test_the_unit_carries_the_folders_and_a_memory_limit_and_systemd_accepts_it(packages, tmp_path):
    """`unit` prints what a service install writes (the same function); systemd's own checker reads it, as
    tests/system/test_package.py does for the packed template."""
    prefix = _installed(packages, tmp_path, tmp_path / "data")
    data = tmp_path / "var" / "data"
    default = _sh(packages["good"], "unit", "--prefix", str(prefix), "--data-dir", str(data))
    assert default.returncode == 0, default.stderr
    assert f"ExecStart={prefix}/current/bin/appliance serve" in default.stdout
    assert f"ReadWritePaths={data}\n" in default.stdout and "\nMemoryMax=90%\n" in default.stdout
    chosen = _sh(packages["good"], "unit", "--prefix", str(prefix), "--data-dir", str(data), "--memory-max", "12G")
    assert chosen.returncode == 0 and "\nMemoryMax=12G\n" in chosen.stdout and "90%" not in chosen.stdout
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed (`just package-tools` installs it)")
    for unit in (default.stdout, chosen.stdout):
        path = tmp_path / "rag-appliance.service"
        path.write_text(unit)
        verified = subprocess.run([analyze, "verify", str(path)], capture_output=True, text=True)
        assert verified.returncode == 0 and not verified.stderr.strip(), verified.stderr
        review = subprocess.run([analyze, "security", "--offline=true", "--threshold=20", "--no-pager", str(path)],
                                capture_output=True, text=True)
        assert review.returncode == 0, review.stdout[-3000:] + review.stderr
