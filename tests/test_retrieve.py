import numpy as np

from appliance.index import TokenBlock, quantize
from appliance.index.tokens import dequantize
from appliance.retrieve import PartitionFilter, maxsim, rrf, select_partitions
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
