from appliance.text import BM25Tokenizer, chunk_text, content_hash, has_cjk, normalise_text


def test_chunks_respect_the_word_limit_and_overlap():
    sentences = [f"Sentence number {i} talks about topic {i % 7} in some detail here." for i in range(60)]
    chunks = chunk_text(" ".join(sentences), max_words=50, overlap_words=10, max_chars_cjk=100, overlap_chars_cjk=10,
                        max_chars=2000)
    assert len(chunks) > 5
    assert all(len(c.split()) <= 50 for c in chunks)
    assert chunks[0].startswith("Sentence number 0")
    # consecutive chunks share their boundary words
    assert chunks[0].split()[-10:] == chunks[1].split()[:10]
    # nothing is lost
    assert set(" ".join(sentences).split()) == set(" ".join(chunks).split())


def test_a_sentence_longer_than_a_chunk_is_cut():
    chunks = chunk_text("word " * 500, max_words=100, overlap_words=0, max_chars_cjk=100, overlap_chars_cjk=0,
                        max_chars=2000)
    assert [len(c.split()) for c in chunks] == [100] * 5


def test_chinese_is_chunked_by_characters():
    text = "锣鼓经常用的节奏型称为锣鼓点。" * 40
    assert has_cjk(text)
    chunks = chunk_text(text, max_words=180, overlap_words=30, max_chars_cjk=100, overlap_chars_cjk=20,
                        max_chars=2000)
    assert len(chunks) >= 6 and all(len(c) <= 100 for c in chunks)


def test_chunks_are_bounded_in_characters_too():
    """A text without spaces is one "word": bounded in words only it was one chunk, however long, and every ask
    that retrieved it tokenised all of it."""
    wordless = "x" * (4 << 20)
    chunks = chunk_text(wordless, 180, 30, 300, 50, max_chars=2000)
    assert max(map(len, chunks)) <= 2000 and "".join(chunks) == wordless, "cut into pieces, nothing lost"
    prose = " ".join(f"extraordinarily-long-sentence-{i:04d}." for i in range(400))
    chunks = chunk_text(prose, 180, 30, 300, 50, max_chars=2000)
    assert max(map(len, chunks)) <= 2000 and max(len(c.split()) for c in chunks) <= 180
    assert set(" ".join(chunks).split()) == set(prose.split()), "words shorter than the bound stay whole"
    assert chunks[0].split()[-30:] == chunks[1].split()[:30], "and chunks still overlap"
    mixed = "See " + "y" * 5000 + " then the end. " + "锣鼓经常用的节奏型称为锣鼓点。" * 40
    assert max(map(len, chunk_text(mixed, 180, 30, 300, 50, max_chars=120))) <= 120


def test_documents_are_chunked_within_the_default_character_bound():
    from appliance.config import ChunkSettings
    from appliance.library.ingest import DocumentInput, prepare_documents

    [doc] = prepare_documents([DocumentInput(text="z" * 100_000)], ChunkSettings())
    assert len(doc.chunks) == 50 and all(len(c) == 2000 for c in doc.chunks)


def test_empty_text_gives_no_chunks():
    assert chunk_text("   ", 10, 2, 10, 2, 100) == []


def test_tokenizer_stems_english_and_drops_stop_words():
    terms = BM25Tokenizer()("The mice were running to the Laboratories")
    assert "the" not in terms and "were" not in terms
    assert "run" in terms and "laboratori" in terms


def test_tokenizer_segments_chinese_words():
    terms = BM25Tokenizer()("《战国无双3》是由哪两个公司合作开发的？")
    assert "战国" in terms and "公司" in terms and "合作" in terms and "开发" in terms
    assert "的" not in terms  # stop word
    assert "3" in terms


def test_full_width_text_normalises_to_half_width():
    assert normalise_text("ＲＡＧ　系统  ok") == "RAG 系统 ok"
    assert BM25Tokenizer()("ＡＢＣ") == BM25Tokenizer()("abc")


def test_content_hash_distinguishes_fields():
    assert content_hash("a", "bc", "{}") != content_hash("ab", "c", "{}")
    assert content_hash("a", "b", "{}") == content_hash("a", "b", "{}")


def test_chunks_keep_their_section_and_cut_at_a_page_break_when_near():
    from appliance.config import ChunkSettings
    from appliance.parse import Block
    from appliance.text import chunk_blocks

    limits = ChunkSettings(max_words=40, overlap_words=5, max_chars_cjk=100, overlap_chars_cjk=10, max_chars=2000)
    sentence = "The pump valve is serviced every spring by the plant crew."  # 11 words
    blocks = [Block(" ".join([sentence] * 3), page=1, section=("Pumps",)),  # 33 words: a page break near the end
              Block(" ".join([sentence] * 2), page=2, section=("Pumps",)),
              Block("A short tail.", page=2, section=("Pumps",)),
              Block("Boilers restart after a power cut.", page=2, section=("Boilers", "Restarts")),
              Block("Tiny foot.", page=2, section=("Valves",)),  # a short run at a page foot stays with what follows
              Block(" ".join([sentence] * 2), page=3, section=("Valves",))]
    chunks = chunk_blocks(blocks, limits)
    assert [(c.page, c.page_end, c.section) for c in chunks] == [
        (1, None, ("Pumps",)), (2, None, ("Pumps",)), (2, None, ("Boilers", "Restarts")), (2, 3, ("Valves",))]
    assert chunks[0].text == " ".join([sentence] * 3), "cut at the page break, no overlap carried across it"
    assert chunks[2].text == "Boilers restart after a power cut."
    assert all(len(c.text.split()) <= 40 for c in chunks)


def test_chunks_of_a_long_section_overlap_and_chinese_is_cut_by_characters():
    from appliance.config import ChunkSettings
    from appliance.parse import Block
    from appliance.text import chunk_blocks

    limits = ChunkSettings(max_words=20, overlap_words=5, max_chars_cjk=30, overlap_chars_cjk=5, max_chars=2000)
    english = " ".join(f"Sentence number {i} says one thing." for i in range(12))
    chinese = "".join(f"第{i}句话说明一件事。" for i in range(10))
    chunks = chunk_blocks([Block(english, section=("A",)), Block(chinese, page=None, section=("B",))], limits)
    english_chunks = [c for c in chunks if c.section == ("A",)]
    chinese_chunks = [c for c in chunks if c.section == ("B",)]
    assert len(english_chunks) > 2 and all(len(c.text.split()) <= 20 for c in english_chunks)
    assert english_chunks[1].text.split()[:5] == english_chunks[0].text.split()[-5:], "overlap inside a section"
    assert len(chinese_chunks) > 2 and all(len(c.text) <= 30 and " " not in c.text for c in chinese_chunks)
