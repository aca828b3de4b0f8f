import asyncio
import subprocess
import sys

import numpy as np
import pytest

from appliance.encode import EncoderBusy, GraphChoice, MicroBatcher, load_encoder
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


# --- which ONNX graph encodes: int8 or fp32, measured at load ----------------------------------------------------

TEXTS = ["Vitamin D deficiency is linked to disease.", "How do I reset my password?",
         "Mitochondria produce most of the cell's energy through oxidative phosphorylation, " * 6]


def test_auto_loads_both_graphs_measures_them_and_names_its_choice(minilm):
    choice = minilm.graphs
    assert set(choice.query_ms) == set(choice.passage_ms) == {"int8", "fp32"}
    assert all(ms > 0 for ms in [*choice.query_ms.values(), *choice.passage_ms.values()])
    assert choice.agreement["fp32"] >= 0.995
    for picked, timings in ((choice.query, choice.query_ms), (choice.passage, choice.passage_ms)):
        # the reference (int8) unless another graph was measured clearly faster
        assert picked == "int8" or timings[picked] < timings["int8"] * 0.95


def test_fp32_and_int8_graphs_rank_alike(models_dir):
    folder = model_folder(models_dir, "minilm")
    int8, fp32 = (load_encoder("minilm", folder, graph=g) for g in ("int8", "fp32"))
    assert int8.graphs.graphs() == ("int8",) and fp32.graphs.graphs() == ("fp32",)
    a, b = int8.encode(TEXTS), fp32.encode(TEXTS)
    assert (a.dense * b.dense).sum(axis=1).min() > 0.995
    for x, y in zip(a.tokens, b.tokens):  # same content tokens, near-identical vectors for late interaction
        assert x.shape == y.shape
        assert (x.astype(np.float32) * y.astype(np.float32)).sum(axis=1).min() > 0.98
    query = fp32.encode(["how much energy do mitochondria make"]).dense[0]
    assert np.argsort(-(a.dense @ query)).tolist() == np.argsort(-(b.dense @ query)).tolist()


def test_queries_and_passages_run_on_the_graph_chosen_for_each(models_dir):
    folder = model_folder(models_dir, "minilm")
    encoder = load_encoder("minilm", folder, graph="int8")
    ran: list[str] = []
    for graph in ("int8", "fp32"):
        pinned = load_encoder("minilm", folder, graph=graph)
        encoder._sessions[graph] = _Recording(pinned._sessions[graph], graph, ran)
        encoder._inputs[graph] = pinned._inputs[graph]
    encoder.graphs = GraphChoice(query="fp32", passage="int8")
    encoder.encode(["a short question"])
    encoder.encode([TEXTS[2] * 2])  # ~190 word pieces: a passage
    encoder.encode(["a short question", TEXTS[2] * 2])  # one batch, two length groups
    assert ran == ["fp32", "int8", "fp32", "int8"]


class _Recording:
    def __init__(self, session, graph, ran):
        self.session, self.graph, self.ran = session, graph, ran

    def run(self, outputs, feed):
        self.ran.append(self.graph)
        return self.session.run(outputs, feed)


def test_a_pinned_graph_that_was_not_built_is_a_clear_error(models_dir, tmp_path):
    folder = tmp_path / "minilm"
    folder.mkdir()
    for name in ("model.onnx", "tokenizer.json"):
        (folder / name).symlink_to(model_folder(models_dir, "minilm") / name)
    with pytest.raises(FileNotFoundError, match="model-fp32.onnx.*models build"):
        load_encoder("minilm", folder, graph="fp32")
    assert load_encoder("minilm", folder).graphs.graphs() == ("int8",)  # auto: what the folder has
    with pytest.raises(ValueError, match="not one of"):
        load_encoder("minilm", folder, graph="fp16")
