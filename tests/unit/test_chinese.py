"""Chinese end to end with the default settings: the partition is detected as Chinese and gets the multilingual
encoder; jieba-segmented BM25 on real CMRC 2018 questions."""
from appliance.evaluate import beir_documents, mrr_at
from appliance.retrieve import PartitionFilter
from appliance.wiring import open_services
from support import CMRC, beir_slice, make_settings, run


def test_chinese_questions_find_their_paragraphs(tmp_path, models_dir):
    data = beir_slice(CMRC, queries=25, distractors=25)
    settings = make_settings(tmp_path, models_dir)

    async def go():
        async with open_services(settings) as services:
            await services.library.ingest("zh", "wiki", beir_documents(data.corpus))
            search = services.retriever.search
            scores = {}
            for mode in ("hybrid", "bm25", "dense"):
                ranks = []
                for qid, text in data.queries.items():
                    result = await search(text, PartitionFilter("zh"), 10, mode=mode)
                    ranks.append(mrr_at(list(dict.fromkeys(h.chunk.doc_key for h in result.hits)), data.qrels[qid]))
                scores[mode] = sum(ranks) / len(ranks)
            late = await search(next(iter(data.queries.values())), PartitionFilter("zh"), 3, late_interaction=True)
            info = services.library.partitions("zh")[0]
        return scores, late, info

    scores, late, info = run(go())
    assert (info.language, info.encoder) == ("zh", "use")
    print(scores)
    assert scores["hybrid"] > 0.6, scores
    assert scores["hybrid"] >= min(scores["bm25"], scores["dense"]), scores
    # USE has no token vectors: the late stage is the characters' (encode/chars.py), and gives no MiniLM-scale score
    assert "late_interaction" in late.timings and all(h.late is None for h in late.hits)


def test_a_chinese_page_past_the_late_candidates_keeps_its_scores_falling(tmp_path, models_dir):
    """k above retrieve.late_candidates: the characters re-rank the head, the rest follow in fused order, and the
    scores (what the order is by) fall all the way down."""
    data = beir_slice(CMRC, queries=3, distractors=40)

    async def go():
        async with open_services(make_settings(tmp_path, models_dir), warm_up=False, generation=False) as services:
            await services.library.ingest("zh", "wiki", beir_documents(data.corpus))
            return await services.retriever.search(next(iter(data.queries.values())), PartitionFilter("zh"), 50)

    result = run(go())
    scores = [h.score for h in result.hits]
    assert len(scores) == 50 and scores == sorted(scores, reverse=True), scores
    assert "late_interaction" in result.timings
