import numpy as np
import pytest

from appliance.index import TokenBlock, TokenCodes, quantize, train_codebook
from appliance.index.tokens import dequantize
from appliance.retrieve import PartitionFilter, maxsim, rrf, select_partitions
from appliance.retrieve.late import BLOCK_TOKENS, maxsim_stored
from appliance.store import Partition


def test_rrf_rewards_agreement_between_lists():
    fused = rrf([["a", "b", "c"], ["c", "a", "d"]], k=60)
    order = [key for key, _ in fused]
    assert order[0] == "a"  # ranks 1 and 2
    assert order.index("c") < order.index("b")  # in both lists beats first-in-one
    assert abs(dict(fused)["a"] - (1 / 61 + 1 / 62)) < 1e-12
    weighted = dict(rrf([["a", "b"], ["b", "a"]], k=60, weights=[1.0, 0.5]))
    assert weighted["a"] > weighted["b"] and abs(weighted["a"] - (1 / 61 + 0.5 / 62)) < 1e-12


def test_maxsim_matches_a_plain_loop():
    rng = np.random.default_rng(0)
    unit = lambda x: x / np.linalg.norm(x, axis=-1, keepdims=True)
    q = unit(rng.normal(size=(5, 16))).astype(np.float32)
    passages = [unit(rng.normal(size=(n, 16))).astype(np.float32) for n in (3, 9, 1)]
    codes, scales = quantize(np.concatenate(passages))
    got = maxsim(q, TokenBlock(dequantize(codes, scales), np.asarray([3, 9, 1])))
    want = [np.mean([max(float(qi @ p[j]) for j in range(len(p))) for qi in q]) for p in passages]
    assert np.allclose(got, want, atol=1e-2)
    # a passage containing the query's tokens scores 1.0
    codes, scales = quantize(q)
    assert abs(maxsim(q, TokenBlock(dequantize(codes, scales), np.asarray([len(q)])))[0] - 1.0) < 1e-2
    assert maxsim(q, TokenBlock.empty(16)).shape == (0,)


@pytest.mark.parametrize("codec", ["int8", "residual"])
def test_maxsim_over_stored_codes_in_blocks_equals_maxsim_over_the_decoded_vectors(codec):
    """The late stage decodes a cache-sized block at a time and divides dot products by the decoded norms: the
    scores are those of decoding everything, normalising and multiplying once, whichever block a passage spans."""
    rng = np.random.default_rng(1)
    unit = lambda x: x / np.linalg.norm(x, axis=-1, keepdims=True)
    lengths = np.asarray([1, 700, 3, BLOCK_TOKENS, 250, 2 * BLOCK_TOKENS + 1])  # passages across block edges
    tokens = unit(rng.normal(size=(int(lengths.sum()), 32))).astype(np.float32)
    q = unit(rng.normal(size=(7, 32))).astype(np.float32)
    if codec == "int8":
        codes = TokenCodes(*quantize(tokens), lengths)
    else:
        book = train_codebook(tokens[:2000], centroids=16, bits=2)
        codes = TokenCodes(*book.encode(tokens), lengths, book)
    decoded = codes.decoded()
    assert np.allclose(np.linalg.norm(decoded.vectors, axis=1), 1.0, atol=2e-2 if codec == "int8" else 1e-5)
    assert np.allclose(maxsim_stored(q, codes), maxsim(q, decoded), atol=1e-5)
    assert np.allclose(maxsim_stored(q, codes), maxsim(q, TokenBlock(tokens, lengths)), atol=0.1)  # near exact
    empty = TokenCodes(codes.first[:0], codes.second[:0], np.zeros(0, np.int64), codes.codebook)
    assert maxsim_stored(q, empty).shape == (0,)


def partition(i, tenant, name, kind="default", lo=None, hi=None):
    return Partition(i, tenant, name, kind, 1, lo, hi)


def test_partition_selection_by_tenant_name_kind_and_time():
    parts = [partition(1, "a", "mail", "mail", 100, 200), partition(2, "a", "wiki", "wiki", 150, 400),
             partition(3, "b", "mail", "mail", 100, 200), partition(4, "a", "empty")]
    names = lambda f: [p.id for p in select_partitions(parts, f)]
    assert names(PartitionFilter("a")) == [1, 2, 4]
    assert names(PartitionFilter("b")) == [3]
    assert names(PartitionFilter("a", names=("mail",))) == [1]
    assert names(PartitionFilter("a", kinds=("wiki",))) == [2]
    assert names(PartitionFilter("a", time_from=250)) == [2]
    assert names(PartitionFilter("a", time_to=120)) == [1]
    assert names(PartitionFilter("a", time_from=160, time_to=170)) == [1, 2]
    assert names(PartitionFilter("c")) == []
