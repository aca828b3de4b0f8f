import asyncio
import subprocess
import sys

import numpy as np
import pytest

from appliance.encode import EncoderBusy, MicroBatcher, load_encoder
from appliance.paths import model_folder


@pytest.fixture(scope="module")
def minilm(models_dir):
    return load_encoder("minilm", model_folder(models_dir, "minilm"), threads=2)


def test_minilm_dense_and_token_vectors_are_normalised(minilm):
    out = minilm.encode(["Vitamin D deficiency is linked to disease.", "Hello"])
    assert out.dense.shape == (2, 384) and out.dense.dtype == np.float32
    assert np.allclose(np.linalg.norm(out.dense, axis=1), 1.0, atol=1e-4)
    assert out.tokens is not None and out.tokens[0].dtype == np.float16
    assert out.tokens[0].shape[1] == 384 and len(out.tokens[0]) > len(out.tokens[1])
    assert np.allclose(np.linalg.norm(out.tokens[0].astype(np.float32), axis=1), 1.0, atol=1e-2)


def test_minilm_puts_paraphrases_closer_than_unrelated_text(minilm):
    v = minilm.encode(["How do I reset my password?", "Steps to change a forgotten login password",
                       "The capital of France is Paris."]).dense
    assert v[0] @ v[1] > v[0] @ v[2] + 0.3


def test_batch_rows_match_single_encodes(minilm):
    texts = ["short", "a somewhat longer sentence about proteins and cells"]
    batch = minilm.encode(texts).dense
    for i, t in enumerate(texts):
        assert float(batch[i] @ minilm.encode([t]).dense[0]) > 0.999  # padding does not change a row


def test_multilingual_encoder_separates_chinese(models_dir):
    use = load_encoder("use", model_folder(models_dir, "use"))
    v = use.encode(["如何重置我的密码", "忘记密码怎么修改", "今天北京的天气很好"]).dense
    assert v.shape == (3, 512) and use.has_token_vectors is False
    assert v[0] @ v[1] > v[0] @ v[2] + 0.2


def test_missing_model_folder_says_how_to_fix(tmp_path):
    with pytest.raises(FileNotFoundError, match="appliance models build"):
        load_encoder("minilm", tmp_path / "nothing")


class CountingEncoder:
    """Wraps the real encoder to record the batch sizes the batcher hands it."""

    def __init__(self, inner):
        self.inner, self.name, self.dim, self.has_token_vectors = inner, inner.name, inner.dim, True
        self.sizes: list[int] = []

    def encode(self, texts):
        self.sizes.append(len(texts))
        return self.inner.encode(texts)


def test_micro_batcher_coalesces_concurrent_calls_and_returns_each_its_row(minilm):
    counting = CountingEncoder(minilm)
    texts = [f"question number {i} about cell biology" for i in range(24)]

    async def go():
        batcher = MicroBatcher(counting, window_ms=20, max_batch=16)
        await batcher.start()
        results = await asyncio.gather(*(batcher.encode(t) for t in texts))
        await batcher.stop()
        return results

    results = asyncio.run(go())
    assert sum(counting.sizes) == 24 and len(counting.sizes) < 24 and max(counting.sizes) <= 16
    expected = minilm.encode(texts).dense
    for i, r in enumerate(results):
        assert float(r.dense @ expected[i]) > 0.999
        assert r.tokens is not None and r.tokens.shape[1] == 384


def test_micro_batcher_queue_is_bounded(minilm):
    async def go():
        batcher = MicroBatcher(minilm, window_ms=50, max_batch=2, queue_size=3)
        await batcher.start()
        calls = [asyncio.ensure_future(batcher.encode(f"q{i}")) for i in range(12)]
        done = await asyncio.gather(*calls, return_exceptions=True)
        await batcher.stop()
        return done

    done = asyncio.run(go())
    busy = [d for d in done if isinstance(d, EncoderBusy)]
    served = [d for d in done if not isinstance(d, Exception)]
    assert busy and served and len(busy) + len(served) == 12


def test_usearch_imported_before_onnxruntime_does_not_crash():
    # usearch 2.26.2-2.26.6 segfault in this order (MODELS.md); the pinned version and package import order guard it
    code = ("import usearch.index, numpy as np; import onnxruntime; "
            "i = usearch.index.Index(ndim=4); i.add(1, np.ones(4, np.float32)); print('ok')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
