"""Fixtures: built models, real data slices, a real server on loopback with a SciFact slice ingested."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from appliance.config import GenerateSettings, Settings
from appliance.evaluate import BeirData, beir_documents
from appliance.models import build_models
import package_builds
import systemd_box
from support import ROOT, SCIFACT, LiveServer, beir_slice, make_settings, observe_boot, write_keys

# A few tests reuse another's helpers (`from test_parse_pdf_text import make_pdf`) across unit/, live/ and
# system/: each folder importable by module name, as pytest itself imports the test files (unique basenames)
sys.path[1:1] = [str(Path(__file__).parent / folder) for folder in ("unit", "live", "system")]


SYSTEMD_TEMPLATE = pytest.StashKey[subprocess.Popen]()  # the service test's root file system, made meanwhile


def pytest_collection_finish(session: pytest.Session) -> None:
    """The package tests' builds and the service test's root file system start now, in the background, so they
    overlap the tests before them."""
    if session.config.option.collectonly or not package_builds.CAN_RUN:
        return
    if any(item.path.name.startswith("test_package") for item in session.items):
        if not package_builds.up_to_date(ROOT / "models"):
            session.config.stash[package_builds.BACKGROUND] = package_builds.Background()
    if any(item.path.name == "test_package_service.py" for item in session.items):
        if not systemd_box.MISSING_TOOLS and not systemd_box.made():
            session.config.stash[SYSTEMD_TEMPLATE] = systemd_box.start_in_background()


def pytest_unconfigure(config: pytest.Config) -> None:
    background = config.stash.get(package_builds.BACKGROUND, None)
    if background is not None:
        background.stop()
    template = config.stash.get(SYSTEMD_TEMPLATE, None)
    if template is not None and template.poll() is None:
        os.killpg(template.pid, signal.SIGKILL)


@pytest.fixture(scope="session")
def builds(request, models_dir) -> dict[str, Path]:
    """The package tests' four packages (package_builds.py): started in the background when the session collected
    those tests, else built here."""
    from appliance import __version__

    background = request.config.stash.get(package_builds.BACKGROUND, None)
    if background is not None:
        background.wait()
    else:
        package_builds.build_all(models_dir)
    assert package_builds.up_to_date(models_dir), "the packages were built from other inputs than these"
    return package_builds.named(__version__)


@pytest.fixture(scope="session")
def models_dir() -> Path:
    build_models(ROOT / "models", log=lambda *_: None)  # idempotent: checks checksums, builds only what is missing
    return ROOT / "models"


@pytest.fixture
def settings(tmp_path, models_dir) -> Settings:
    return make_settings(tmp_path, models_dir)


@pytest.fixture(scope="session")
def scifact_slice() -> BeirData:
    return beir_slice(SCIFACT, queries=60, distractors=200)


@pytest.fixture(scope="session")
def served(tmp_path_factory, models_dir, scifact_slice):
    """One server for the HTTP tests, with the SciFact slice ingested into tenant `sci`, partition `abstracts`."""
    data_dir = tmp_path_factory.mktemp("served")
    with LiveServer(make_settings(data_dir, models_dir)) as live:
        docs = [{"id": d.id, "title": d.title, "text": d.text} for d in beir_documents(scifact_slice.corpus)]
        with live.client() as client:
            reply = client.post("/v1/documents", json={"tenant": "sci", "partition": "abstracts", "documents": docs})
            assert reply.status_code == 200, reply.text
        yield live


@pytest.fixture(scope="session")
def tiny_llm(tmp_path_factory) -> Path:
    """A random-weight Llama with a locally trained tokenizer: real vLLM, fast, gibberish output."""
    from appliance.models.tiny import build_tiny_llm

    return build_tiny_llm(tmp_path_factory.mktemp("tiny") / "tiny-llm")


@pytest.fixture(scope="session")
def llm_served(tmp_path_factory, models_dir, tiny_llm):
    """One server with real engines for the whole session: small = the tiny model on core 0, large = SmolLM2 (the
    previous default: it starts in seconds and answers in a fraction of one) on core 1. The default model's own
    answers are tested in test_default_model.py. API keys for tenants `default` (sent by
    `live.client()`) and `other`, and an admin key (`live.keys["admin"]`). `boot` records what clients saw while it
    warmed up."""
    data_dir = tmp_path_factory.mktemp("llm")
    keys_file, keys = write_keys(data_dir, ["default", "other"], admin=True)
    settings = make_settings(data_dir, models_dir, generate_enabled="true",
                             demo_corpus="true", small_enabled="true", small_model=str(tiny_llm),
                             small_kv_cache_gib="0.125", large_model="smollm2", large_kv_cache_gib="0.25",
                             large_cpu_cores="1", generate_restart_delay_s="0.5",
                             generate_min_relevance=str(GenerateSettings().min_relevance),
                             admission_keys_file=str(keys_file), admission_max_in_flight="48",
                             admission_wait_budget_s="3")
    live = LiveServer(settings, api_key=keys["default"])
    live.keys = keys
    live.start()
    boot = observe_boot(live)
    try:
        yield live, boot
    finally:
        live.__exit__()
