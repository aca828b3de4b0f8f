"""Format detection, text decoding, the plain-text and PDF parsers, and the dispatcher, on the SciFact and CMRC
fixture files and on hostile files made here (encrypted, scanned, truncated, random, PNG, empty)."""
from __future__ import annotations

import hashlib
import io
import json
import random
import struct
import zipfile
from collections import Counter
from pathlib import Path

import pypdfium2 as pdfium
import pytest
from PIL import Image

from appliance.parse import Format, ParseError, ParseErrorCode, ParseLimits, detect_format, parse_bytes
from appliance.parse.detect import decode_text
from appliance.parse.text import parse as parse_text

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
SCIFACT = DATA / "scifact_files"
CMRC = DATA / "cmrc_files"
EXPECTED = {".pdf": Format.PDF, ".docx": Format.DOCX, ".html": Format.HTML, ".md": Format.MARKDOWN,
            ".txt": Format.TEXT}


def corpus(folder: Path) -> dict[str, dict]:
    with open(folder / "corpus.jsonl", encoding="utf-8") as f:
        return {doc["_id"]: doc for doc in map(json.loads, f)}


def producers(folder: Path) -> dict[str, str]:
    rows = (folder / "manifest.tsv").read_text(encoding="utf-8").splitlines()[1:]
    return {row.split("\t")[0]: row.split("\t")[2] for row in rows}


def char_f1(got: str, want: str) -> float:
    """Bag-of-characters F1 on whitespace-normalised text."""
    a, b = Counter(" ".join(got.split())), Counter(" ".join(want.split()))
    overlap = sum((a & b).values())
    if not overlap:
        return 0.0
    precision, recall = overlap / sum(a.values()), overlap / sum(b.values())
    return 2 * precision * recall / (precision + recall)


def paragraphs(text: str) -> list[str]:
    return [" ".join(p.split()) for p in text.split("\n") if p.strip()]


# --- a small PDF writer: Helvetica (WinAnsi) text lines, optional metadata title, outline and RC4 encryption ---

_PAD = bytes.fromhex("28BF4E5E4E758A4164004E56FFFA01082E2E00B6D0683E802F0CA9FE6453697A")
_FILE_ID = b"0123456789abcdef"


def rc4(key: bytes, data: bytes) -> bytes:
    s, j = list(range(256)), 0
    for i in range(256):
        j = (j + s[i] + key[i % len(key)]) % 256
        s[i], s[j] = s[j], s[i]
    out, i, j = bytearray(), 0, 0
    for byte in data:
        i = (i + 1) % 256
        j = (j + s[i]) % 256
        s[i], s[j] = s[j], s[i]
        out.append(byte ^ s[(s[i] + s[j]) % 256])
    return bytes(out)


def standard_security(user: str, owner: str) -> tuple[bytes, bytes, bytes]:
    """Revision 2 (40-bit RC4) of the PDF standard security handler: file key, /O and /U."""
    def pad(pw: str) -> bytes:
        return (pw.encode("latin-1") + _PAD)[:32]
    o = rc4(hashlib.md5(pad(owner)).digest()[:5], pad(user))
    key = hashlib.md5(pad(user) + o + struct.pack("<i", -44) + _FILE_ID).digest()[:5]
    return key, o, rc4(key, _PAD)


def make_pdf(pages: list[list[tuple[float, float, float, str]]], title: str | None = None,
             outline: list[tuple[str, int, float]] = (), password: str | None = None) -> bytes:
    """pages: per page, (font size, x, y, text) lines. outline: flat (title, 1-based page, y) entries."""
    n_pages = len(pages)
    page_ids = [4 + i for i in range(n_pages)]
    content_ids = [4 + n_pages + i for i in range(n_pages)]
    next_id = 4 + 2 * n_pages
    objs: dict[int, bytes] = {1: b"<< /Type /Catalog /Pages 2 0 R%s >>", 3: b"<< /Type /Font /Subtype /Type1 "
                              b"/BaseFont /Helvetica /Encoding /WinAnsiEncoding >>"}
    streams: dict[int, bytes] = {}
    for i, lines in enumerate(pages):
        ops = b"".join(b"BT /F1 %.1f Tf %.1f %.1f Td (%s) Tj ET\n" % (size, x, y, _pdf_string(text))
                       for size, x, y, text in lines)
        streams[content_ids[i]] = ops
        objs[page_ids[i]] = (b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << "
                             b"/F1 3 0 R >> >> /Contents %d 0 R >>" % content_ids[i])
    objs[2] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (b" ".join(b"%d 0 R" % p for p in page_ids), n_pages)
    catalog_extra = b""
    if outline:
        root, items = next_id, list(range(next_id + 1, next_id + 1 + len(outline)))
        next_id += 1 + len(outline)
        objs[root] = b"<< /Type /Outlines /First %d 0 R /Last %d 0 R /Count %d >>" % (items[0], items[-1], len(items))
        for k, (text, page, y) in enumerate(outline):
            links = (b" /Prev %d 0 R" % items[k - 1] if k else b"") + (
                b" /Next %d 0 R" % items[k + 1] if k + 1 < len(items) else b"")
            objs[items[k]] = (b"<< /Title (%s) /Parent %d 0 R /Dest [%d 0 R /XYZ 72 %.1f 0]%s >>"
                              % (_pdf_string(text), root, page_ids[page - 1], y, links))
        catalog_extra = b" /Outlines %d 0 R" % root
    objs[1] = objs[1] % catalog_extra
    trailer = b""
    if title is not None:
        objs[next_id] = b"<< /Title (%s) >>" % _pdf_string(title)
        trailer += b" /Info %d 0 R" % next_id
        next_id += 1
    key = None
    if password is not None:
        key, o, u = standard_security(password, "owner-" + password)
        objs[next_id] = b"<< /Filter /Standard /V 1 /R 2 /O <%s> /U <%s> /P -44 >>" % (o.hex().encode(),
                                                                                         u.hex().encode())
        trailer += b" /Encrypt %d 0 R /ID [<%s> <%s>]" % (next_id, _FILE_ID.hex().encode(), _FILE_ID.hex().encode())
        next_id += 1
    for num, data in streams.items():
        if key is not None:
            data = rc4(hashlib.md5(key + num.to_bytes(3, "little") + b"\x00\x00").digest()[:10], data)
        objs[num] = b"<< /Length %d >>\nstream\n%s\nendstream" % (len(data), data)
    out, offsets = bytearray(b"%PDF-1.4\n"), {}
    for num in sorted(objs):
        offsets[num] = len(out)
        out += b"%d 0 obj\n%s\nendobj\n" % (num, objs[num])
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % next_id
    out += b"".join(b"%010d 00000 n \n" % offsets[num] for num in range(1, next_id))
    out += b"trailer\n<< /Size %d /Root 1 0 R%s >>\nstartxref\n%d\n%%%%EOF\n" % (next_id, trailer, xref)
    return bytes(out)


def _pdf_string(text: str) -> bytes:
    return text.encode("cp1252").replace(b"\\", b"\\\\").replace(b"(", b"\\(").replace(b")", b"\\)")


def body(y: float, *lines: str, size: float = 11, pitch: float = 14) -> list[tuple[float, float, float, str]]:
    return [(size, 72, y - k * pitch, line) for k, line in enumerate(lines)]


# --- detection ---

@pytest.mark.parametrize("folder", [SCIFACT, CMRC], ids=["scifact", "cmrc"])
def test_every_fixture_file_is_detected_by_content(folder):
    files = sorted((folder / "files").iterdir())
    assert len(files) in (500, 250)
    found = {f.name: detect_format(f.read_bytes()) for f in files}
    wrong = {name: fmt for name, fmt in found.items() if fmt != EXPECTED[Path(name).suffix]}
    assert wrong == {}


def test_detection_ignores_the_file_name(tmp_path):
    # A copy of each kind under a misleading name is still told by its bytes.
    originals = {ext: next((SCIFACT / "files").glob(f"*{ext}")) for ext in EXPECTED}
    for ext, original in originals.items():
        disguised = tmp_path / (original.stem + (".txt" if ext != ".txt" else ".pdf"))
        disguised.write_bytes(original.read_bytes())
        assert detect_format(disguised.read_bytes()) == EXPECTED[ext]
        if ext in (".pdf", ".txt"):
            assert parse_bytes(disguised.read_bytes()).format == EXPECTED[ext]


def test_detection_of_text_kinds():
    assert detect_format(b"  <!-- x -->\n<!DOCTYPE html><title>t</title><p>x</p>") == Format.HTML
    assert detect_format(b"\xef\xbb\xbf<?xml version='1.0'?>\n<html xmlns='x'><body>hi</body></html>") == Format.HTML
    assert detect_format(b"<div><p>One</p><p>Two</p><table><tr><td>3</td></tr></table></div>") == Format.HTML
    assert detect_format(b"Title\n=====\n\nSome text.\n") == Format.MARKDOWN
    assert detect_format(b"Intro\n\n```python\nprint(1)\n```\n") == Format.MARKDOWN
    assert detect_format(b"See [a](http://a.example) and [b](http://b.example).\n\n- one\n- two\n") == Format.MARKDOWN
    assert detect_format(b"Just a note.\n\nIt has #hashtags and a - dash, 3 < 4.\n") == Format.TEXT
    assert detect_format("第一段。\n\n第二段。".encode("gb18030")) == Format.TEXT
    assert detect_format(b"  \n %PDF-1.7\n junk") == Format.PDF  # junk before the header, as readers allow


def test_detection_of_binary_and_other_zips():
    assert detect_format(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 512) is None  # old .doc
    assert detect_format(_png()) == Format.PNG  # read by OCR: tests/unit/test_parse_ocr.py
    assert detect_format(b"GIF89a\x01\x00\x01\x00") is None
    assert detect_format(b"text with a NUL\x00 byte") is None
    other_zip = io.BytesIO()
    with zipfile.ZipFile(other_zip, "w") as z:
        z.writestr("xl/workbook.xml", "<workbook/>")
    assert detect_format(other_zip.getvalue()) is None
    docx = next((SCIFACT / "files").glob("*.docx")).read_bytes()
    with pytest.raises(ParseError) as err:
        detect_format(docx[: len(docx) // 2])
    assert err.value.code == ParseErrorCode.CORRUPT and "damaged or truncated Office file" in err.value.message


# --- text decoding and the plain-text parser ---

def test_gb18030_files_decode_to_the_corpus_text_exactly():
    docs = corpus(CMRC)
    files = sorted((CMRC / "files").glob("*.txt"))
    assert len(files) == 62
    for f in files:
        text, encoding = decode_text(f.read_bytes())
        doc = docs[f.stem]
        expected = "\n\n".join(([doc["title"]] if doc["title"] else []) + [p.strip() for p in doc["text"].split("\n")])
        assert (text, encoding) == (expected + "\n", "gb18030"), f.name


def test_text_files_title_and_paragraphs():
    for folder in (SCIFACT, CMRC):
        docs = corpus(folder)
        for f in sorted((folder / "files").glob("*.txt")):
            doc, parsed = docs[f.stem], parse_bytes(f.read_bytes())
            assert parsed.format == Format.TEXT and parsed.title == doc["title"], f.name
            assert [b.text for b in parsed.blocks] == paragraphs(doc["text"]), f.name
            assert all(b.page is None and b.section == () for b in parsed.blocks)


def test_bom_encodings():
    text = "Título\n\nnaïve café — 中文 €"
    for codec, name in (("utf-16", "utf-16-le"), ("utf-16-be", "utf-16-be"), ("utf-8-sig", "utf-8-sig"),
                        ("utf-32", "utf-32-le")):
        data = text.encode(codec) if codec != "utf-16-be" else b"\xfe\xff" + text.encode(codec)
        assert decode_text(data) == (text, name)
        assert detect_format(data) == Format.TEXT
        parsed = parse_bytes(data)
        assert (parsed.title, parsed.text, parsed.encoding) == ("Título", "naïve café — 中文 €", name)


def test_big5_gbk_and_short_chinese():
    traditional = ("臺灣位於東亞，是一個島嶼。臺北是最大的城市，人口眾多，交通便利。"
                   "這裡的夜市很有名，吸引了許多觀光客前來品嚐各種小吃。")
    assert decode_text(traditional.encode("big5")) == (traditional, "big5")
    simplified = "北京是中华人民共和国的首都，也是全国的政治、文化中心。"
    assert decode_text(simplified.encode("gbk")) == (simplified, "gb18030")  # GB18030 reads GBK and GB2312 alike
    assert decode_text(simplified.encode("gb2312")) == (simplified, "gb18030")
    rare = "𬬻是一种化学元素，符号是Nh。"  # a character only GB18030 (4-byte) encodes
    assert decode_text(rare.encode("gb18030")) == (rare, "gb18030")
    # Short texts, which charset-normalizer alone often calls Korean, Thai or Big5.
    # Not those whose GB18030 bytes happen to be valid UTF-8 (圣训学): UTF-8 wins those, as it must for "café".
    titles = [doc["title"] for doc in corpus(CMRC).values() if not _is_utf8(doc["title"])]
    assert len(titles) > 200
    for title in titles:
        assert decode_text(title.encode("gb18030")) == (title, "gb18030")
    western = "Café crème brûlée, naïve façade"
    assert decode_text(western.encode("cp1252")) == (western, "cp1252")


def test_text_parser_wrapping_and_title_rules():
    data = ("A Short Title\r\n\r\nThe first paragraph is\r\nwrapped over   three\r\nlines.\r\n\r\n"
            "第一段的文字\n被折成两行。\n\nwell-\nknown\n").encode("utf-8")
    doc = parse_text(data, ParseLimits())
    assert doc.title == "A Short Title"
    assert [b.text for b in doc.blocks] == ["The first paragraph is wrapped over three lines.",
                                            "第一段的文字被折成两行。", "well-known"]
    # No title: the first line is long, ends like a continuation, or is the only paragraph.
    assert parse_text(b"Dear all,\n\nthe meeting moved.", ParseLimits()).title == ""
    assert parse_text(b"Only one line here", ParseLimits()).title == ""
    assert parse_text(("x" * 300 + "\n\nmore").encode(), ParseLimits()).title == ""


# --- PDFs of the fixtures ---

@pytest.mark.parametrize("folder", [SCIFACT, CMRC], ids=["scifact", "cmrc"])
def test_pdf_text_fidelity_titles_and_pages(folder):
    docs, made_by = corpus(folder), producers(folder)
    scores: dict[str, list[float]] = {}
    for f in sorted((folder / "files").glob("*.pdf")):
        doc, parsed = docs[f.stem], parse_bytes(f.read_bytes())
        assert parsed.format == Format.PDF and parsed.pages >= 1
        assert parsed.title == doc["title"], f.name
        assert parsed.blocks[0].text != doc["title"]  # the title heading is not repeated as a block
        assert all(1 <= b.page <= parsed.pages and b.section == () for b in parsed.blocks), f.name
        assert [b.page for b in parsed.blocks] == sorted(b.page for b in parsed.blocks)
        if parsed.pages > 1:
            assert {b.page for b in parsed.blocks} == set(range(1, parsed.pages + 1)), f.name
        f1 = char_f1(parsed.title + " " + parsed.text, doc["title"] + " " + doc["text"])
        assert f1 >= 0.97, (f.name, f1)
        scores.setdefault(made_by[f.stem], []).append(f1)
    expected = {"chromium-pdf", "libreoffice-pdf"} if folder == SCIFACT else {"libreoffice-pdf"}
    assert set(scores) == expected
    for producer, values in scores.items():
        assert sum(values) / len(values) >= 0.995, producer


def test_pdf_paragraphs_follow_the_source_paragraphs():
    docs = corpus(SCIFACT)
    multi = [f for f in sorted((SCIFACT / "files").glob("*.pdf")) if len(paragraphs(docs[f.stem]["text"])) >= 3]
    assert len(multi) >= 20
    for f in multi:
        parsed = parse_bytes(f.read_bytes())
        want = paragraphs(docs[f.stem]["text"])
        # Blocks never span pages, so a paragraph cut by a page break makes two.
        assert len(want) <= len(parsed.blocks) <= len(want) + parsed.pages - 1, f.name


def test_chinese_pdf_has_no_spaces_inserted_between_cjk_and_digits():
    doc = corpus(CMRC)["DEV_1014"]
    parsed = parse_bytes((CMRC / "files" / "DEV_1014.pdf").read_bytes())
    assert parsed.title == "林俊贤"
    assert parsed.text == doc["text"]


# --- PDFs made here ---

HEADINGS_PDF = [
    [(24, 72, 740, "Anti-inflammatory Effects of Green Tea")]
    + [(18, 72, 700, "Introduction")]
    + body(676, "Green tea is studied for its effect on inflam-", "mation in a three-",
           "dimensional model of the gut.")
    + body(620, "A second paragraph of the introduction, with", "a three-dimensional culture again.")
    + [(14, 72, 570, "Background")]
    + body(546, "Background text on page one."),
    [(18, 72, 740, "Methods")]
    + body(716, "Mice were fed green tea for", "ten weeks.")
    + [(14, 72, 670, "Statistics")]
    + body(646, "Means were compared with t tests."),
]


def test_pdf_headings_make_sections_and_pages():
    parsed = parse_bytes(make_pdf(HEADINGS_PDF))
    assert parsed.pages == 2 and parsed.title == "Anti-inflammatory Effects of Green Tea"
    got = [(b.page, b.section, b.text) for b in parsed.blocks]
    assert got == [
        (1, ("Introduction",), "Green tea is studied for its effect on inflammation in a three-dimensional model of "
                               "the gut."),
        (1, ("Introduction",), "A second paragraph of the introduction, with a three-dimensional culture again."),
        (1, ("Introduction", "Background"), "Background text on page one."),
        (2, ("Methods",), "Mice were fed green tea for ten weeks."),
        (2, ("Methods", "Statistics"), "Means were compared with t tests."),
    ]


def test_pdf_metadata_title_wins_unless_it_is_a_file_name():
    assert parse_bytes(make_pdf(HEADINGS_PDF, title="Microsoft Word - draft7.docx")).title.startswith("Anti-")
    assert parse_bytes(make_pdf(HEADINGS_PDF, title="Untitled")).title.startswith("Anti-")
    parsed = parse_bytes(make_pdf(HEADINGS_PDF, title="Anti-inflammatory Effects of Green Tea"))
    assert parsed.title == "Anti-inflammatory Effects of Green Tea"
    assert all("Anti-inflammatory" not in b.text and "Anti-inflammatory" not in b.section for b in parsed.blocks)
    other = parse_bytes(make_pdf(HEADINGS_PDF, title="Green tea and the gut (preprint)"))
    assert other.title == "Green tea and the gut (preprint)"


def test_pdf_outline_gives_the_sections():
    outline = [("Introduction", 1, 705), ("Methods", 2, 745)]
    parsed = parse_bytes(make_pdf(HEADINGS_PDF, outline=outline))
    sections = {(b.page, b.section) for b in parsed.blocks}
    assert sections == {(1, ("Introduction",)), (2, ("Methods",))}
    assert "Introduction" not in parsed.text and "Methods" not in parsed.text  # headings in the outline: no blocks


def test_pdf_running_heads_and_page_numbers_are_dropped():
    pages = [[(9, 72, 770, "Journal of Tests, vol. 3")] + body(700, f"Text of page {n} goes here.")
             + [(9, 300, 40, str(n))] for n in range(1, 5)]
    parsed = parse_bytes(make_pdf(pages))
    assert [(b.page, b.text) for b in parsed.blocks] == [(n, f"Text of page {n} goes here.") for n in range(1, 5)]


def test_pdf_with_text_on_some_pages_only():
    parsed = parse_bytes(make_pdf([body(700, "Only the first page has text."), [], body(700, "And the third.")]))
    assert parsed.pages == 3 and [(b.page, b.text) for b in parsed.blocks] == [(1, "Only the first page has text."),
                                                                              (3, "And the third.")]


def test_encrypted_pdf():
    data = make_pdf([body(700, "Secret text.")], password="s3cret")
    with pdfium.PdfDocument(data, password="s3cret") as pdf:  # the file is real: the password opens it
        page = pdf[0]
        assert page.get_textpage().get_text_range().strip() == "Secret text."
    assert detect_format(data) == Format.PDF
    with pytest.raises(ParseError) as err:
        parse_bytes(data)
    assert err.value.code == ParseErrorCode.ENCRYPTED and err.value.message.startswith("encrypted PDF")
    # Encrypted with an empty user password (permissions only): readers open it without asking, and so do we.
    assert parse_bytes(make_pdf([body(700, "Open text.")], password="")).text == "Open text."


def test_scanned_pdf_has_no_text_layer():
    scan = io.BytesIO()
    Image.new("RGB", (600, 800), "white").save(scan, format="PDF")
    with pytest.raises(ParseError) as err:
        parse_bytes(scan.getvalue())
    assert err.value.code == ParseErrorCode.NO_TEXT_LAYER and "OCR" in err.value.message


def test_truncated_pdfs_are_corrupt():
    made_by = producers(SCIFACT)
    for producer in ("libreoffice-pdf", "chromium-pdf"):
        stem = next(s for s, p in sorted(made_by.items()) if p == producer)
        data = (SCIFACT / "files" / f"{stem}.pdf").read_bytes()
        with pytest.raises(ParseError) as err:
            parse_bytes(data[: len(data) // 2])
        assert err.value.code == ParseErrorCode.CORRUPT and "truncated" in err.value.message


def test_unsupported_and_empty_inputs():
    noise = random.Random(7).randbytes(4096)
    assert detect_format(noise) is None
    for data in (noise, b"GIF89a\x01\x00\x01\x00" + bytes(64), b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(600)):
        with pytest.raises(ParseError) as err:
            parse_bytes(data)
        assert err.value.code == ParseErrorCode.UNSUPPORTED and "supported: PDF, DOCX" in err.value.message
    for data in (b"", b"  \n\t \r\n"):
        with pytest.raises(ParseError) as err:
            parse_bytes(data)
        assert err.value.code == ParseErrorCode.EMPTY


def test_limits():
    with pytest.raises(ParseError) as err:
        parse_bytes(make_pdf(HEADINGS_PDF), ParseLimits(max_pages=1))
    assert err.value.code == ParseErrorCode.TOO_LARGE
    for data in (make_pdf(HEADINGS_PDF), b"Title\n\n" + b"word " * 100):
        with pytest.raises(ParseError) as err:
            parse_bytes(data, ParseLimits(max_chars=50))
        assert err.value.code == ParseErrorCode.TOO_LARGE


def test_parser_failures_reach_the_caller_as_parse_errors(monkeypatch):
    import appliance.parse.text as text_module

    def broken(data, limits):
        raise KeyError("boom")
    monkeypatch.setattr(text_module, "parse", broken)
    with pytest.raises(ParseError) as err:
        parse_bytes(b"Some plain text.")
    assert err.value.code == ParseErrorCode.CORRUPT and err.value.message.startswith("could not read the text file")


def _is_utf8(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode("gb18030").decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def _png() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (4, 4), "red").save(out, format="PNG")
    return out.getvalue()
