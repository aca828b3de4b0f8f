"""Chinese end to end: the multilingual encoder and jieba-segmented BM25 on real CMRC 2018 questions."""
from appliance.evaluate import beir_documents, mrr_at
from appliance.pipeline import Appliance
from appliance.retrieve import PartitionFilter
from support import CMRC, beir_slice, make_settings, run


def test_chinese_questions_find_their_paragraphs(tmp_path, models_dir):
    data = beir_slice(CMRC, queries=25, distractors=25)
    settings = make_settings(tmp_path, models_dir, encoder_model="use")

    async def go():
        app = Appliance(settings)
        await app.start()
        await app.ingest("zh", "wiki", beir_documents(data.corpus))
        scores = {}
        for mode in ("hybrid", "bm25", "dense"):
            ranks = []
            for qid, text in data.queries.items():
                result = await app.search(text, PartitionFilter("zh"), 10, mode=mode)
                ranks.append(mrr_at(list(dict.fromkeys(h.chunk.doc_key for h in result.hits)), data.qrels[qid]))
            scores[mode] = sum(ranks) / len(ranks)
        late = await app.search(next(iter(data.queries.values())), PartitionFilter("zh"), 3, late_interaction=True)
        await app.stop()
        return scores, late

    scores, late = run(go())
    print(scores)
    assert scores["hybrid"] > 0.6, scores
    assert scores["hybrid"] >= min(scores["bm25"], scores["dense"]), scores
    assert "late_interaction" not in late.timings  # USE has no token vectors: the stage is skipped, not faked
