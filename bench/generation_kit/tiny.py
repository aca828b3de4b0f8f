"""Section 4's models: a tiny random Llama (appliance.models.tiny) and its AWQ 4-bit copy (appliance.models.quantize).

Both are built once into bench/.cache/ (the builders skip a folder that is already complete), so only the first
run pays for AWQ's calibration. Their prompts are SciFact abstracts through the tiny model's own tokenizer.
"""
from __future__ import annotations

import importlib.util
import json
import time
from pathlib import Path

from .data import CACHE, SCIFACT, dir_bytes


def available() -> str | None:
    """None when both builders exist; else why section 4 cannot run."""
    missing = [m for m in ("appliance.models.tiny", "appliance.models.quantize") if importlib.util.find_spec(m) is None]
    return f"not measured: {', '.join(missing)} missing" if missing else None


def build(hidden: int, layers: int, heads: int, group_size: int, log) -> dict:
    """Builds (or finds) the unquantized and the AWQ model; their folders, sizes and build times."""
    from appliance.models.quantize import default_calibration_texts, quantize_awq
    from appliance.models.tiny import build_tiny_llm

    name = f"tiny-h{hidden}-l{layers}-a{heads}"
    src, awq = CACHE / name, CACHE / f"{name}-awq-g{group_size}"
    out: dict = {"hidden": hidden, "layers": layers, "heads": heads, "group_size": group_size, "bits": 4}
    started = time.perf_counter()
    fresh = not (src / "config.json").is_file()
    build_tiny_llm(src, hidden=hidden, layers=layers, heads=heads, seed=0)
    out["build_s"] = round(time.perf_counter() - started, 1) if fresh else "cached"
    started = time.perf_counter()
    record = awq.with_name(awq.name + ".build.json")  # how long the quantization took, kept with the cache
    fresh = not (awq / "config.json").is_file()
    try:
        quantize_awq(src, awq, default_calibration_texts(), group_size=group_size, bits=4, log=log)
        if fresh:
            out["quantize_s"] = round(time.perf_counter() - started, 1)
            record.write_text(json.dumps({"quantize_s": out["quantize_s"], "date": time.strftime("%Y-%m-%d %H:%M")}))
        else:
            out["quantize_s"] = "cached"
            if record.is_file():
                out["quantize_first_run"] = json.loads(record.read_text())
    except Exception as exc:  # reported, not fatal: the rest of the benchmark still runs
        out["quantize_error"] = f"{type(exc).__name__}: {exc}"[:300]
        awq = None
    out["folders"] = {"unquantized": str(src), "awq": str(awq) if awq else None}
    out["disk_bytes"] = {"unquantized": dir_bytes(src), "awq": dir_bytes(awq) if awq else None}
    out["weights_bytes"] = {"unquantized": _weights(src), "awq": _weights(awq) if awq else None}
    return out


def _weights(folder: Path) -> int:
    return sum(p.stat().st_size for p in Path(folder).glob("*.safetensors"))


def awq_runnable() -> tuple[bool, str]:
    """Whether vLLM can run AWQ on this machine (platform.vllm_can_run_awq), with the CPU capability."""
    import torch

    try:
        from appliance.generate.platform import vllm_can_run_awq
    except ImportError:
        return True, "unknown"
    capability = torch.backends.cpu.get_cpu_capability()
    return bool(vllm_can_run_awq()), capability


def prompts(model: Path, n: int, tokens: int) -> list[list[int]]:
    """`n` distinct prompts of about `tokens` tokens each: SciFact abstracts through the tiny tokenizer."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model))
    out = []
    with open(SCIFACT / "corpus.jsonl", encoding="utf-8") as f:
        for line in f:
            doc = json.loads(line)
            ids = tok.encode(f"{doc.get('title', '')}\n{doc['text']}", add_special_tokens=False)
            if len(ids) >= tokens:
                out.append(ids[:tokens])
            if len(out) == n:
                break
    return out
