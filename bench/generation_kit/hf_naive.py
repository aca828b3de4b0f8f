"""The naive server: Hugging Face transformers `generate` behind an asyncio queue, in its own process.

    python bench/generation_kit/hf_naive.py SPEC.json OUT.json

Two ways a simple server answers many clients with `generate`:
- sequential: one request at a time, in arrival order (the others wait in the queue);
- static: wait until `batch` requests are queued (or the run's last ones), left-pad them to the longest prompt,
  one `generate` call for all, answer all at once.
The compute dtype comes from the spec (the bf16 checkpoint is upcast at load for float32).
`generate` runs in a worker thread so the clients' timestamps are taken while it computes. The process uses the
torch thread count in the spec (the same cores vLLM gets). Greedy decoding, and `min_new_tokens = max_new_tokens`
so that every request yields exactly max_tokens tokens, like vLLM's ignore_eos.
"""
from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for generation_kit.measure

from generation_kit.engine import Contention  # noqa: E402  (psutil + /proc only; vLLM is not imported)
from generation_kit.measure import closed_loop  # noqa: E402


def load(model_dir: str, threads: int, dtype: str = "float32"):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(threads)
    tok = AutoTokenizer.from_pretrained(model_dir)
    tok.padding_side = "left"
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype))
    model.eval()
    return torch, tok, model


class NaiveServer:
    def __init__(self, torch, tok, model, max_tokens: int):
        self.torch, self.tok, self.model, self.max_tokens = torch, tok, model, max_tokens
        self.batches: list[int] = []

    def generate(self, prompts: list[list[int]]) -> list[list[int]]:
        torch = self.torch
        width = max(map(len, prompts))
        pad = self.tok.pad_token_id
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
        with torch.inference_mode():
            out = self.model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=self.max_tokens,
                                      min_new_tokens=self.max_tokens, do_sample=False, pad_token_id=pad)
        self.batches.append(len(prompts))
        return [row[width:].tolist() for row in out]

    async def run(self, prompts: list[list[int]], mode: str, clients: int, requests: int, batch: int) -> dict:
        queue: asyncio.Queue = asyncio.Queue()
        loop = asyncio.get_running_loop()
        self.batches = []
        remaining = [requests]  # requests not yet taken into a batch: the last batch may be short

        async def worker() -> None:
            size = 1 if mode == "sequential" else batch
            while True:
                items = [await queue.get()]
                want = min(size, remaining[0])
                while len(items) < want:
                    items.append(await queue.get())
                remaining[0] -= len(items)
                outs = await asyncio.to_thread(self.generate, [p for p, _ in items])
                for (_, fut), out in zip(items, outs):
                    fut.set_result(out)

        async def send(i: int) -> dict:
            fut = loop.create_future()
            await queue.put((prompts[i % len(prompts)], fut))
            out = await fut
            return {"tokens": len(out)}

        task = asyncio.create_task(worker())
        try:
            result = await closed_loop(send, clients, requests)
        finally:
            task.cancel()
        result["batch_sizes"] = sorted(set(self.batches))
        return result


async def main(spec_path: str, out_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    started = time.perf_counter()
    torch, tok, model = load(spec["model"], spec["threads"], spec.get("dtype", "float32"))
    server = NaiveServer(torch, tok, model, spec["max_tokens"])
    results = {"threads": torch.get_num_threads(), "load_s": round(time.perf_counter() - started, 1),
               "dtype": str(model.dtype), "attn_implementation": getattr(model.config, "_attn_implementation", None),
               "runs": [], "sample": None}
    prompts = spec["prompts"]
    server.generate([prompts[0][:32]])  # warm-up on a short prompt (a full one takes ~30 s in bf16 here), not timed
    if spec.get("sample", True):
        results["sample"] = server.generate(prompts[:2])  # greedy tokens of two prompts, compared with vLLM's
    for run in spec["runs"]:
        load_before = [round(x, 2) for x in os.getloadavg()]
        contention = Contention()
        r = await server.run(prompts[run["offset"]:run["offset"] + run["requests"]], run["mode"], run["clients"],
                             run["requests"], run.get("batch", run["clients"]))
        r.update(mode=run["mode"], load_before=load_before, **contention.stop())
        print(f"    transformers {run['mode']:10s} {run['clients']:2d} clients: {r['output_tok_s']} tok/s, "
              f"p50 {r['p50_ms']} ms, p99 {r['p99_ms']} ms ({r['requests']} requests, {r['wall_s']} s)", flush=True)
        results["runs"].append(r)
    Path(out_path).write_text(json.dumps(results))


def launch(spec: dict, work: Path, timeout_s: float) -> dict:
    """Run this file in a fresh process with `spec`; its results (the parent never imports torch for this)."""
    import subprocess

    work.mkdir(parents=True, exist_ok=True)
    spec_path, out_path = work / "hf-spec.json", work / "hf-out.json"
    spec_path.write_text(json.dumps(spec))
    out_path.unlink(missing_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": str(spec["threads"]), "MKL_NUM_THREADS": str(spec["threads"]),
           "TOKENIZERS_PARALLELISM": "false"}
    subprocess.run([sys.executable, "-u", __file__, str(spec_path), str(out_path)], env=env, check=True,
                   timeout=timeout_s)
    return json.loads(out_path.read_text())


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
