"""A CycloneDX 1.5 SBOM of the package: every bundled Python distribution and every model, each with its version,
licence and (models) the sha256 of its main file."""
from __future__ import annotations

import json
import platform
import re
import uuid
from datetime import datetime, timezone

from bundled import BundledPackage
from stage import BundledModel

_SPDX = re.compile(r"^\(?[A-Za-z0-9.+-]+\)?( (AND|OR|WITH) \(?[A-Za-z0-9.+-]+\)?)*$")


def _licences(text: str) -> list[dict]:
    """An SPDX expression where the metadata gives one, its words as a named licence otherwise."""
    if _SPDX.match(text):
        return [{"expression": text}]
    return [{"license": {"name": text[:200]}}]


def sbom(version: str, flavour: str, packages: list[BundledPackage], models: list[BundledModel]) -> str:
    components = [{
        "type": "library", "bom-ref": f"pkg:pypi/{p.name.lower()}@{p.version}", "name": p.name,
        "version": p.version, "purl": f"pkg:pypi/{p.name.lower()}@{p.version}", "licenses": _licences(p.licence),
    } for p in packages]
    components += [{
        "type": "machine-learning-model", "bom-ref": f"model:{m.name}", "name": m.name, "version": version,
        "description": m.source, "licenses": _licences(m.licence),
        "hashes": [{"alg": "SHA-256", "content": m.sha256}],
    } for m in models]
    document = {
        "bomFormat": "CycloneDX", "specVersion": "1.5", "serialNumber": f"urn:uuid:{uuid.uuid4()}", "version": 1,
        "metadata": {
            "timestamp": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "component": {"type": "application", "bom-ref": "rag-appliance", "name": "rag-appliance",
                          "version": version, "description": f"{flavour} package, frozen with PyInstaller on "
                          f"Python {platform.python_version()} ({platform.machine()})"},
        },
        "components": components,
    }
    return json.dumps(document, indent=1) + "\n"
