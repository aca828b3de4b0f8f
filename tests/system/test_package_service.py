"""The package installed as a service, the way an admin does it (`sudo sh FILE install`), on a box whose systemd is
booted: a Debian container (tests/systemd_box.py) with only loopback. The installer keeps the settings a
provisioning tool wrote before it, creates the user, writes the unit, starts it and waits for /readyz; a broken
upgrade is rolled back and the previous version restarted by systemd; `sudo appliance keys add` turns keys on and
the service boots and serves with that key; uninstall keeps the data and settings, `--purge` then removes them and
the user.

Needs root, debootstrap (and Debian's mirror once, for the container's root file system) and systemd-nspawn:
`just package-tools` installs them. CI runs as root.
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

import package_builds
import systemd_box
from support import DATA, ROOT

CAN_RUN = package_builds.CAN_RUN and not systemd_box.MISSING_TOOLS
pytestmark = pytest.mark.skipif(not CAN_RUN and not os.environ.get("CI"), reason=(
    f"needs root on Linux, {', '.join(package_builds.TOOLS + systemd_box.TOOLS)} (missing: "
    f"{package_builds.MISSING_TOOLS + systemd_box.MISSING_TOOLS}); `just package-tools` installs them"))
DRIVER = ROOT / "tests" / "package_driver.py"
PDF = DATA / "scifact_files" / "files" / "10029970.pdf"
QUESTION = "What does the Conserved Domain Database annotate?"
UNIT = "rag-appliance.service"
URL = "http://127.0.0.1:8080"
PREFIX, DATA_DIR, ETC = "/opt/rag-appliance", "/var/lib/rag-appliance", "/etc/rag-appliance"


@pytest.fixture
def box(builds, tmp_path):
    assert CAN_RUN, (package_builds.MISSING_TOOLS, systemd_box.MISSING_TOOLS, os.geteuid())
    booted = systemd_box.Box(tmp_path, {package_builds.OUT: "/packages"})
    yield booted
    booted.stop()


def _install(box: systemd_box.Box, package: Path, *args: str):
    started = time.monotonic()
    done = box.run("sh", f"/packages/{package.relative_to(package_builds.OUT)}", *args, timeout=1800)
    return done, time.monotonic() - started


def _driver(box: systemd_box.Box, *args: str) -> dict:
    done = box.on_loopback(sys.executable, str(DRIVER), args[0], URL, *args[1:])
    assert done.returncode == 0, done.stderr[-3000:] + box.journal(UNIT)[-3000:]
    return json.loads(done.stdout)


def _serving(box: systemd_box.Box, version: str) -> dict[str, str]:
    """The unit is enabled and active, runs `version` as the appliance user, and sees the system read-only."""
    assert box.run("systemctl", "is-enabled", UNIT).stdout.strip() == "enabled"
    unit = box.unit(UNIT, "ActiveState", "MainPID", "User")
    assert unit["ActiveState"] == "active" and unit["User"] == "appliance", unit
    assert box.run("readlink", f"{PREFIX}/current").stdout.strip() == version
    uid = box.run("id", "-u", "appliance").stdout.strip()
    status = box.run("cat", f"/proc/{unit['MainPID']}/status").stdout
    assert f"\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n" in status, status
    assert "\nCapEff:\t0000000000000000\n" in status and "\nNoNewPrivs:\t1\n" in status, status
    mounts = {fields[4]: fields[5].split(",") for fields in
              (line.split() for line in box.run("cat", f"/proc/{unit['MainPID']}/mountinfo").stdout.splitlines())}
    assert "ro" in mounts["/"], mounts  # ProtectSystem=strict
    assert "rw" in mounts[DATA_DIR], mounts  # ReadWritePaths: the data folder only
    return unit


def _provision_settings(box: systemd_box.Box) -> None:
    """The box's settings written before the install, as a provisioning tool does it (the installer keeps them, as
    on an upgrade): the first-install template with the engine on SmolLM2, which the package ships too (the test
    installs "lite", this build without the default model's weights: package_builds.py). What the
    unit, the rollback and the keys do does not depend on the model, and this test boots the server three times (a
    frozen server's boot on 2 cores: ~50-60 s on SmolLM2, ~90 s on the default model). The default model answering
    from an installed package: test_package.py's offline test."""
    template = (ROOT / "packaging" / "appliance.toml.in").read_text()
    settings = template.replace("@DATA_DIR@", DATA_DIR).replace("@PORT@", URL.rsplit(":", 1)[1])
    etc = box.root / ETC.lstrip("/")
    etc.mkdir(parents=True)
    (etc / "appliance.toml").write_text(settings + '\n[large]\nmodel = "smollm2"\n')


def test_service_install_starts_the_unit_rolls_back_a_broken_upgrade_and_keeps_data(builds, box):
    version = builds["version"]
    _provision_settings(box)
    done, install_s = _install(box, builds["lite"], "install")
    assert done.returncode == 0, done.stderr[-3000:] + box.journal(UNIT)[-3000:]
    assert "created the system user 'appliance'" in done.stderr and f"{version} is installed" in done.stderr
    assert f"settings kept: {ETC}/appliance.toml" in done.stderr, done.stderr[-3000:]
    first = _serving(box, version)
    settings = box.run("stat", "-c", "%U:%G %a", ETC, f"{ETC}/appliance.toml", DATA_DIR).stdout.split("\n")
    assert settings[:3] == ["root:appliance 750", "root:appliance 640", "appliance:appliance 750"], settings

    ingested = _driver(box, "ingest", str(PDF))
    assert ingested["status"] == 200 and ingested["documents"] == [PDF.name], ingested
    asked = _driver(box, "ask", QUESTION)
    assert asked["answer"].strip() and asked["sources"][0]["document_id"] == PDF.name, asked

    broken, _ = _install(box, builds["broken"], "install", "--ready-timeout", "300")
    assert broken.returncode == 3, broken.stderr[-3000:]
    assert f"rolling back to {version}" in broken.stderr, broken.stderr[-3000:]
    assert box.run("test", "-e", f"{PREFIX}/9.9.9-broken").returncode == 1
    restarted = _serving(box, version)
    assert restarted["MainPID"] != first["MainPID"], "the previous version was started again"
    after = _driver(box, "inventory", QUESTION)
    assert after["documents"] == [PDF.name] and after["again"]["cache"] == "exact", after
    assert after["again"]["answer"] == asked["answer"]

    # Keys on, as an admin does it: root adds a key; the file is root:appliance 0640, so the service still boots.
    keys_file = f"{ETC}/keys.toml"
    box.run("sed", "-i", f's|^keys_file = ""|keys_file = "{keys_file}"|', f"{ETC}/appliance.toml")
    added = box.run(f"{PREFIX}/current/bin/appliance", "keys", "add", "--tenant", "default", timeout=300)
    assert added.returncode == 0, added.stderr
    assert box.run("stat", "-c", "%U:%G %a", keys_file).stdout.strip() == "root:appliance 640"
    box.run("systemctl", "restart", UNIT)
    ready = box.run(f"{PREFIX}/current/bin/appliance", "ready", "--wait", "600", timeout=700)
    assert ready.returncode == 0, ready.stderr + box.journal(UNIT)[-3000:]
    keyed = _driver(box, "keyed", added.stdout.strip())
    assert keyed == {"status": 200, "documents": [PDF.name], "without_key": 401}, keyed

    removed, _ = _install(box, builds["lite"], "uninstall")
    assert removed.returncode == 0 and "kept the data" in removed.stderr, removed.stderr
    assert box.run("systemctl", "is-active", UNIT).stdout.strip() == "inactive"
    assert box.run("test", "-e", f"/etc/systemd/system/{UNIT}").returncode == 1
    assert box.run("test", "-f", f"{DATA_DIR}/store.sqlite3").returncode == 0
    assert box.run("test", "-f", f"{ETC}/appliance.toml").returncode == 0
    # (uninstall then install keeping the data: test_package.py, the same installer path without the unit)

    purged, _ = _install(box, builds["lite"], "uninstall", "--purge")  # what the uninstall kept
    assert purged.returncode == 0 and "--purge" in purged.stderr, purged.stderr
    nothing, _ = _install(box, builds["lite"], "uninstall", "--purge")
    assert nothing.returncode == 1 and "nothing is installed" in nothing.stderr, nothing.stderr
    for gone in (DATA_DIR, ETC, PREFIX, f"/etc/systemd/system/{UNIT}"):
        assert box.run("test", "-e", gone).returncode == 1, gone
    assert box.run("getent", "passwd", "appliance").returncode == 2
    print(f"service install to ready {install_s:.1f} s")
