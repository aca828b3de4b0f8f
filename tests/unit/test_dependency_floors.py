"""Lower bounds in pyproject.toml that keep out versions with known vulnerabilities, and the installed versions
meet them (a bound the venv does not satisfy would only be discovered by the package build)."""

import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
# package -> (first fixed version, the advisory it fixes)
FIXED = {
    "starlette": ("0.47.2", "CVE-2025-54121: a large multipart upload blocks the event loop while it rolls to disk"),
    "python-multipart": ("0.0.18", "CVE-2024-53981: boundary junk makes the parser log one line per byte"),
}


def _requirements() -> dict[str, Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return {(r := Requirement(line)).name: r for line in project["dependencies"]}


@pytest.mark.parametrize("package", sorted(FIXED))
def test_no_vulnerable_version_is_admitted(package):
    fixed, advisory = FIXED[package]
    spec = _requirements()[package].specifier
    last_vulnerable = Version(fixed)
    # any release before the fixed one: the previous micro, and the lowest versions of its series
    below = [Version(v) for v in ("0.0.1", "0.1", f"{last_vulnerable.major}.{last_vulnerable.minor}.0")
             if Version(v) < last_vulnerable]
    admitted = [str(v) for v in below if spec.contains(v, prereleases=True)]
    assert not admitted, f"{package}{spec} admits {admitted}: {advisory} (fixed in {fixed})"
    assert spec.contains(version(package)), f"installed {package} {version(package)} is outside {spec}"
