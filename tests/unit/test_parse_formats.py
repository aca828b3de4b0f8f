"""The DOCX, PPTX, HTML and Markdown parsers and the zip-bomb guard, on the SciFact/CMRC fixture files and on
files made here for the cases those do not cover."""
from __future__ import annotations

import io
import json
import struct
import time
import tracemalloc
import zipfile
import zlib
from pathlib import Path

import docx
from docx.enum.style import WD_STYLE_TYPE
import pptx
import pytest
from pptx.util import Inches

from appliance.parse import Format, ParseError, ParseErrorCode, ParseLimits, parse_bytes
from appliance.parse import detect, pdf_layout
from appliance.parse import docx as docx_parser
from appliance.parse import html as html_parser
from appliance.parse import markdown as md_parser
from appliance.parse import pptx as pptx_parser
from appliance.parse.archive import open_archive, safe_package

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
SCIFACT, CMRC = DATA / "scifact_files", DATA / "cmrc_files"
LIMITS = ParseLimits()
BOILERPLATE_EN = ["Cookie", "cookies", "Privacy policy", "Log in", "Related links", "Subscribe", "Share:",
                  "Open Abstracts Library", "Sitemap", "gtag", "Search abstracts"]
BOILERPLATE_ZH = ["Cookie", "隐私政策", "登录", "相关链接", "分享到", "百科文库", "首页", "gtag"]
PARSERS = {"docx": docx_parser, "html": html_parser, "md": md_parser}


def norm(text: str) -> str:
    return " ".join(text.split())


def fixture_files(folder: Path, ext: str) -> list[Path]:
    if not folder.exists():
        pytest.skip(f"{folder} is missing")
    return sorted((folder / "files").glob(f"*.{ext}"))


def corpus(folder: Path) -> dict[str, dict]:
    with open(folder / "corpus.jsonl", encoding="utf-8") as f:
        return {row["_id"]: row for row in map(json.loads, f)}


# --- the fixture files: every one parses back to its source title and text ----------------------------------

@pytest.mark.parametrize("folder,ext", [(SCIFACT, "docx"), (SCIFACT, "html"), (SCIFACT, "md"),
                                        (CMRC, "docx"), (CMRC, "html")])
def test_fixture_files_give_back_the_source_title_and_text(folder, ext):
    files, source = fixture_files(folder, ext), corpus(folder)
    assert len(files) >= 60
    wrong = []
    for path in files:
        doc = PARSERS[ext].parse(path.read_bytes(), LIMITS)
        expected = source[path.stem]
        if norm(doc.title) != norm(expected["title"]) or norm(doc.text) != norm(expected["text"]):
            wrong.append(path.name)
        assert doc.pages is None
        # The title heading is neither a block nor a section above the paragraphs.
        assert all(block.section == () for block in doc.blocks), path.name
    # Measured: exact for all of them (the raw Markdown abstracts' `<`, `[`, `*` included); no tolerance needed.
    assert wrong == []


@pytest.mark.parametrize("folder,words", [(SCIFACT, BOILERPLATE_EN), (CMRC, BOILERPLATE_ZH)])
def test_html_fixtures_lose_the_site_boilerplate(folder, words):
    for path in fixture_files(folder, "html"):
        doc = html_parser.parse(path.read_bytes(), LIMITS)
        assert doc.encoding == "utf-8"
        found = [w for w in words if w.lower() in (doc.title + doc.text).lower()]
        assert not found, (path.name, found)


def test_dispatch_sends_each_fixture_format_to_its_parser():
    for ext, fmt in [("docx", Format.DOCX), ("html", Format.HTML), ("md", Format.MARKDOWN)]:
        path = fixture_files(SCIFACT, ext)[0]
        doc = parse_bytes(path.read_bytes())
        assert doc.format is fmt and norm(doc.title) == norm(corpus(SCIFACT)[path.stem]["title"])


# --- DOCX ------------------------------------------------------------------------------------------------------

def docx_bytes(build) -> bytes:
    document = docx.Document()
    build(document)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def test_docx_headings_build_the_path_and_tables_stay_in_body_order():
    def build(d):
        d.add_heading("Annual report", level=1)
        d.styles.add_style("TOC 1", WD_STYLE_TYPE.PARAGRAPH)
        d.add_paragraph("Contents", style="TOC Heading")  # the table of contents repeats the headings: left out
        d.add_paragraph("Finance\t2", style="TOC 1")
        d.add_paragraph("Opening words.")
        d.add_heading("Finance", level=2)
        d.add_paragraph("Money matters.")
        table = d.add_table(rows=2, cols=3)
        for r, row in enumerate([["Year", "Revenue", "Cost"], ["2024", "10", "7"]]):
            for c, value in enumerate(row):
                table.cell(r, c).text = value
        d.add_heading("Details", level=3)
        d.add_paragraph("First point", style="List Bullet")
        d.add_paragraph("Second point", style="List Number")
        d.add_heading("Staff", level=2)
        d.add_paragraph("People  matter.\tA lot.")
    doc = docx_parser.parse(docx_bytes(build), LIMITS)
    assert doc.format is Format.DOCX and doc.title == "Annual report" and doc.pages is None
    assert [(b.text, b.section) for b in doc.blocks] == [
        ("Opening words.", ()),
        ("Money matters.", ("Finance",)),
        ("Year | Revenue | Cost\n2024 | 10 | 7", ("Finance",)),
        ("First point", ("Finance", "Details")),
        ("Second point", ("Finance", "Details")),
        ("People matter. A lot.", ("Staff",)),
    ]


def test_docx_title_from_core_properties_or_title_style():
    def with_core(d):
        d.core_properties.title = "  The real   title "
        d.add_heading("Chapter one", level=1)
        d.add_paragraph("Text.")
    doc = docx_parser.parse(docx_bytes(with_core), LIMITS)
    assert doc.title == "The real title"
    assert [(b.text, b.section) for b in doc.blocks] == [("Text.", ("Chapter one",))]

    def with_title_style(d):
        d.add_paragraph("A Title paragraph", style="Title")
        d.add_heading("Intro", level=1)
        d.add_paragraph("Body.")
    doc = docx_parser.parse(docx_bytes(with_title_style), LIMITS)
    assert doc.title == "A Title paragraph"
    assert [(b.text, b.section) for b in doc.blocks] == [("Body.", ("Intro",))]


def test_chinese_docx():
    def build(d):
        d.add_heading("北京的历史", level=1)
        d.add_heading("元朝", level=2)
        d.add_paragraph("元朝定都大都，即今北京。")
    doc = docx_parser.parse(docx_bytes(build), LIMITS)
    assert doc.title == "北京的历史"
    assert [(b.text, b.section) for b in doc.blocks] == [("元朝定都大都，即今北京。", ("元朝",))]


def test_empty_truncated_and_oversized_docx_are_refused():
    with pytest.raises(ParseError) as e:
        docx_parser.parse(docx_bytes(lambda d: None), LIMITS)
    assert e.value.code is ParseErrorCode.EMPTY
    data = docx_bytes(lambda d: d.add_paragraph("Some text here."))
    with pytest.raises(ParseError) as e:
        docx_parser.parse(data[: len(data) // 2], LIMITS)
    assert e.value.code is ParseErrorCode.CORRUPT
    with pytest.raises(ParseError) as e:
        docx_parser.parse(docx_bytes(lambda d: d.add_paragraph("x" * 200)), ParseLimits(max_chars=100))
    assert e.value.code is ParseErrorCode.TOO_LARGE


def test_ole_office_files_are_told_apart():
    ole = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(504)
    with pytest.raises(ParseError) as e:
        docx_parser.parse(ole + "EncryptedPackage".encode("utf-16-le") + bytes(600), LIMITS)
    assert e.value.code is ParseErrorCode.ENCRYPTED
    with pytest.raises(ParseError) as e:
        pptx_parser.parse(ole + "WordDocument".encode("utf-16-le") + bytes(600), LIMITS)
    assert e.value.code is ParseErrorCode.UNSUPPORTED
    # and so through the product's path, where the content (not a parser chosen by name) decides
    with pytest.raises(ParseError) as e:
        parse_bytes(ole + "EncryptedPackage".encode("utf-16-le") + bytes(600), LIMITS)
    assert e.value.code is ParseErrorCode.ENCRYPTED and "password" in e.value.message
    with pytest.raises(ParseError) as e:
        parse_bytes(ole + "WordDocument".encode("utf-16-le") + bytes(600), LIMITS)
    assert e.value.code is ParseErrorCode.UNSUPPORTED and ".doc" in e.value.message and "DOCX" in e.value.message


# --- PPTX ------------------------------------------------------------------------------------------------------

def deck_bytes(core_title: str) -> bytes:
    deck = pptx.Presentation()
    deck.core_properties.title = core_title
    first = deck.slides.add_slide(deck.slide_layouts[0])
    first.shapes.title.text = "Quarterly review"
    first.placeholders[1].text = "Prepared by the data team"
    second = deck.slides.add_slide(deck.slide_layouts[1])
    second.shapes.title.text = "Results"
    body = second.placeholders[1].text_frame
    body.text = "Revenue rose 12%"
    body.add_paragraph().text = "Costs fell"
    second.notes_slide.notes_text_frame.text = "Mention the one-off costs."
    third = deck.slides.add_slide(deck.slide_layouts[5])
    third.shapes.title.text = "Figures"
    table = third.shapes.add_table(2, 2, Inches(1), Inches(2), Inches(4), Inches(1)).table
    for (r, c), value in zip([(0, 0), (0, 1), (1, 0), (1, 1)], ["Region", "Sales", "North", "42"]):
        table.cell(r, c).text = value
    group = third.shapes.add_group_shape()
    group.shapes.add_textbox(0, 0, Inches(1), Inches(1)).text_frame.text = "grouped note"
    deck.slides.add_slide(deck.slide_layouts[5]).shapes.title.text = "Questions?"  # a title-only slide
    out = io.BytesIO()
    deck.save(out)
    return out.getvalue()


def test_pptx_slides_are_pages_and_slide_titles_are_sections():
    doc = pptx_parser.parse(deck_bytes("Q3 business review"), LIMITS)
    assert doc.format is Format.PPTX and doc.title == "Q3 business review" and doc.pages == 4
    assert [(b.text, b.page, b.section) for b in doc.blocks] == [
        ("Prepared by the data team", 1, ("Quarterly review",)),
        ("Revenue rose 12%\nCosts fell", 2, ("Results",)),
        ("Mention the one-off costs.", 2, ("Results",)),
        ("Region | Sales\nNorth | 42", 3, ("Figures",)),
        ("grouped note", 3, ("Figures",)),
        ("Questions?", 4, ()),
    ]


def test_pptx_title_falls_back_to_the_first_slide_title():
    doc = pptx_parser.parse(deck_bytes("PowerPoint Presentation"), LIMITS)  # a program's default: not a title
    assert doc.title == "Quarterly review"
    assert doc.blocks[0].section == () and doc.blocks[1].section == ("Results",)


# --- Markdown --------------------------------------------------------------------------------------------------

MARKDOWN = """---
title: "Notes on assays"
tags: [lab, draft]
---
# Notes on assays

Scores were a*b*c with p<0.05 (P <.001) in <CD4> cells; 2*3*4, x_y_z, 95% CI [1.02-1.09], A & B &amp; C.
A **bold** claim and *emphasis*, a [link](http://example.org) and `code`.

## Methods

### Samples

1. first *sample*
2. second
   - nested bullet

> quoted line

| Assay | Result |
|-------|--------|
| ELISA | positive |

```python
x = 1
    indented
```

## Results
Setext heading
--------------
<div><p>Raw <b>HTML</b> block</p><script>evil()</script></div>
"""


def test_markdown_structure_and_faithful_text():
    doc = md_parser.parse(MARKDOWN.encode(), LIMITS)
    assert doc.format is Format.MARKDOWN and doc.title == "Notes on assays" and doc.encoding == "utf-8"
    assert [(b.text, b.section) for b in doc.blocks] == [
        ("Scores were a*b*c with p<0.05 (P <.001) in <CD4> cells; 2*3*4, x_y_z, 95% CI [1.02-1.09], A & B & C. "
         "A bold claim and emphasis, a link and code.", ()),
        ("1. first sample", ("Methods", "Samples")),
        ("2. second", ("Methods", "Samples")),
        ("nested bullet", ("Methods", "Samples")),
        ("quoted line", ("Methods", "Samples")),
        ("Assay | Result\nELISA | positive", ("Methods", "Samples")),
        ("x = 1\n    indented", ("Methods", "Samples")),
        ("Raw HTML block", ("Setext heading",)),
    ]


def test_markdown_title_is_the_first_heading_only_when_it_is_an_h1():
    doc = md_parser.parse("Top\n===\n\ntext\n\n# Second\n\nmore".encode(), LIMITS)
    assert doc.title == "Top" and [b.section for b in doc.blocks] == [(), ("Second",)]
    doc = md_parser.parse("## Sub first\n\ntext\n\n# Later h1\n\nmore".encode(), LIMITS)
    assert doc.title == "" and [b.section for b in doc.blocks] == [("Sub first",), ("Later h1",)]
    doc = md_parser.parse("中文标题\n\n第一行\n第二行".encode("gb18030"), LIMITS)
    assert doc.encoding == "gb18030" and doc.blocks[-1].text == "第一行第二行"


# --- HTML ------------------------------------------------------------------------------------------------------

NO_MAIN_PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>Site | Field notes</title>
<style>p{color:red}</style></head><body>
<div id="cookie-consent">We use cookies. <a href="/ok">Accept</a></div>
<div class="top"><a href="/">Home</a> | <a href="/a">About</a> | <a href="/login">Log in</a></div>
<nav><ul><li><a href="/x">Menu item</a></li></ul></nav>
<div class="content">
  <h1>Field notes</h1>
  Text straight in a div, with a <a href="/ref">reference</a> inside.
  <h2>Birds</h2>
  <p>We saw   many
     birds.<br>Mostly gulls.</p>
  <div hidden>Hidden text</div><div style="display: none">Also hidden</div><span aria-hidden="true">icon</span>
  <ul><li>Gulls</li><li>Terns <ul><li>Arctic</li></ul></li></ul>
  <pre>line 1
    line 2</pre>
  <table><tr><th>Bird</th><th>Count</th></tr><tr><td>Gull</td><td>12</td></tr></table>
  <h3>Calls</h3><blockquote>Kee-ow</blockquote>
  <dl><dt>Gull</dt><dd>A sea bird</dd></dl>
  <figure><img src="g.png" alt="a gull"><figcaption>A gull in flight</figcaption></figure>
</div>
<aside class="sidebar"><h2>Related links</h2><a href="/1">One</a></aside>
<div class="share-buttons"><a href="#">Twitter</a></div>
<div><a href="/1">Older post</a> <a href="/2">Newer post</a></div>
<footer><p>Privacy policy | Terms</p></footer>
<script>track()</script>
</body></html>"""


def test_html_page_without_main_keeps_content_and_drops_boilerplate():
    doc = html_parser.parse(NO_MAIN_PAGE.encode(), LIMITS)
    assert doc.format is Format.HTML and doc.title == "Field notes" and doc.pages is None
    assert [(b.text, b.section) for b in doc.blocks] == [
        ("Text straight in a div, with a reference inside.", ()),
        ("We saw many birds.\nMostly gulls.", ("Birds",)),
        ("Gulls", ("Birds",)),
        ("Terns", ("Birds",)),
        ("Arctic", ("Birds",)),
        ("line 1\n    line 2", ("Birds",)),
        ("Bird | Count\nGull | 12", ("Birds",)),
        ("Kee-ow", ("Birds", "Calls")),
        ("Gull", ("Birds", "Calls")),
        ("A sea bird", ("Birds", "Calls")),
        ("A gull in flight", ("Birds", "Calls")),
    ]


def test_html_title_sources_and_encodings():
    page = '<html><head><meta property="og:title" content="OG title"><title>T</title></head><body><p>x</p></body>'
    assert html_parser.parse(page.encode(), LIMITS).title == "OG title"
    page = "<html><head><title>Only   title</title></head><body><main><h2>Sub</h2><p>x</p></main></body>"
    assert html_parser.parse(page.encode(), LIMITS).title == "Only title"
    chinese = ('<html><head><meta http-equiv="Content-Type" content="text/html; charset=gb2312"></head>'
               "<body><article><h1>长城</h1><p>长城是古代中国的防御工程。</p></article></body></html>")
    doc = html_parser.parse(chinese.encode("gb18030"), LIMITS)
    assert (doc.title, doc.text, doc.encoding) == ("长城", "长城是古代中国的防御工程。", "gb18030")
    doc = html_parser.parse(b"\xef\xbb\xbf<p>caf\xc3\xa9</p>", LIMITS)
    assert doc.text == "café" and doc.encoding in ("utf-8", "utf-8-sig")  # as decode_text names a BOM
    lying = '<meta charset="utf-8"><p>长城</p>'.encode("gb18030")  # the meta is wrong: detection decides
    assert html_parser.parse(lying, LIMITS).text == "长城"


def test_html_dominant_article_and_empty_pages():
    page = ("<body><main><article><h1>Big</h1><p>" + "word " * 200 + "</p></article>"
            "<article><p>small teaser</p></article></main></body>")
    doc = html_parser.parse(page.encode(), LIMITS)
    assert doc.title == "Big" and "small teaser" not in doc.text
    teasers = "".join(f"<article><h2>Post {i}</h2><p>Teaser {i}</p></article>" for i in range(3))
    doc = html_parser.parse(f"<body><main>{teasers}</main></body>".encode(), LIMITS)
    assert [b.text for b in doc.blocks] == ["Teaser 0", "Teaser 1", "Teaser 2"]
    with pytest.raises(ParseError) as e:
        html_parser.parse(b"<html><body><nav><a href=/>Home</a></nav><script>x()</script></body></html>", LIMITS)
    assert e.value.code is ParseErrorCode.EMPTY


def test_deeply_nested_html_is_refused_quickly():
    start = time.perf_counter()
    with pytest.raises(ParseError) as e:
        html_parser.parse(b"<div>" * 200_000 + b"deep", LIMITS)
    assert e.value.code is ParseErrorCode.TOO_LARGE and time.perf_counter() - start < 2
    assert html_parser.parse(b"<div>" * 2_000 + b"deep" + b"</div>" * 2_000, LIMITS).text == "deep"


# --- regexes on hostile text: time grows with the size, not its square ------------------------------------------

def _seconds(work) -> float:
    best = float("inf")
    for _ in range(3):  # the best of three: a busy shared box only ever adds time
        start = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - start)
    return best


HOSTILE_TEXT = {  # what each regex met in the issue or in a sweep: one unit, repeated
    "markdown detection, brackets": (lambda t: detect.looks_like_markdown(t), "["),
    "markdown detection, open links": (lambda t: detect.looks_like_markdown(t), "[a](b"),
    "markdown detection, open emphasis": (lambda t: detect.looks_like_markdown(t), "**a "),
    "html nesting, open tags": (lambda t: html_parser._nesting_depth(t, 1000), "<a"),
    "markdown raw html, open scripts": (md_parser.html_text, "<script "),
    "markdown raw html, open comments": (md_parser.html_text, "<!--"),
    "markdown raw html, open brackets": (md_parser.html_text, "<"),
    "markdown raw html, a bracket and blanks": (lambda t: md_parser.html_text("<" + t), " "),
    "front matter title and blanks": (lambda t: md_parser.split_front_matter(f"---\ntitle:a{t}b\n---\n"), " "),
    "pdf page number and blanks": (lambda t: pdf_layout._PAGE_NUMBER.match("page" + t), " "),
    "pdf trailing word": (lambda t: pdf_layout._TRAILING_WORD.search(t + " "), "a"),
}


@pytest.mark.parametrize("case", list(HOSTILE_TEXT))
def test_parse_regexes_take_linear_time_on_hostile_text(case):
    work, unit = HOSTILE_TEXT[case]
    small, large = unit * (8192 // len(unit)), unit * (32768 // len(unit))
    one, four = _seconds(lambda: work(small)), _seconds(lambda: work(large))
    # linear: about 4x at 4x the size; quadratic is 16x (these took 0.3 s -> 5 s and worse before)
    assert four < 8 * one + 0.05, f"{case}: {one:.3f} s at 8 KiB, {four:.3f} s at 32 KiB"


def test_hostile_text_files_parse_far_inside_the_parse_timeout():
    for data in (b"[" * 262_144, b"<html><body>" + b"<a" * 131_072, b"# t\n\n" + b"<script " * 32_768):
        start = time.perf_counter()
        try:
            parse_bytes(data, LIMITS)
        except ParseError as exc:  # no text is a fine answer; taking minutes is not
            assert exc.code is ParseErrorCode.EMPTY
        assert time.perf_counter() - start < 3, data[:16]


# --- zip bombs -------------------------------------------------------------------------------------------------

def raw_zip(members: list[tuple[str, bytes, int, int]]) -> bytes:
    """A zip of deflated members (name, deflate stream, declared CRC, declared size): lets a header lie."""
    local, central = bytearray(), bytearray()
    for name, packed, crc, size in members:
        offset, encoded = len(local), name.encode()
        local += struct.pack("<4s5H3L2H", b"PK\x03\x04", 20, 0, 8, 0, 0x21, crc, len(packed), size, len(encoded), 0)
        local += encoded + packed
        central += struct.pack("<4s6H3L5H2L", b"PK\x01\x02", 20, 20, 0, 8, 0, 0x21, crc, len(packed), size,
                               len(encoded), 0, 0, 0, 0, 0, offset) + encoded
    end = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, len(members), len(members), len(central), len(local), 0)
    return bytes(local + central + end)


def deflate(data: bytes) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, -15)
    return packer.compress(data) + packer.flush()


@pytest.fixture(scope="module")
def gigabyte_of_zeros() -> tuple[bytes, int]:
    """1 GiB of zeros deflated (about 1 MB) and its CRC, without deflating 1 GiB: after a full flush the
    compressor's state is reset, so every 1 MiB chunk deflates to the same bytes."""
    chunk, packer = bytes(1 << 20), zlib.compressobj(9, zlib.DEFLATED, -15)
    piece = packer.compress(chunk) + packer.flush(zlib.Z_FULL_FLUSH)
    crc = 0
    for _ in range(1024):
        crc = zlib.crc32(chunk, crc)
    return piece * 1024 + packer.flush(), crc


def docx_shell(document_xml: tuple[bytes, int, int] | None = None) -> list[tuple[str, bytes, int, int]]:
    """The members of a real DOCX, with word/document.xml replaced by (deflate stream, CRC, size) if given."""
    members = []
    with zipfile.ZipFile(io.BytesIO(docx_bytes(lambda d: d.add_paragraph("Hello.")))) as z:
        for info in z.infolist():
            content = z.read(info)
            if info.filename == "word/document.xml" and document_xml is not None:
                members.append((info.filename, *document_xml))
            else:
                members.append((info.filename, deflate(content), zlib.crc32(content), len(content)))
    return members


def test_a_gigabyte_member_is_refused_without_unpacking(gigabyte_of_zeros):
    packed, crc = gigabyte_of_zeros
    bomb = raw_zip(docx_shell((packed, crc, 1 << 30)))
    assert len(bomb) < 2_000_000
    for parser in (docx_parser, pptx_parser):
        start = time.perf_counter()
        with pytest.raises(ParseError) as e:
            parser.parse(bomb, LIMITS)
        assert e.value.code is ParseErrorCode.TOO_LARGE and time.perf_counter() - start < 1
        assert "1,073,741,824" in e.value.message and "536,870,912" in e.value.message
    # Under a higher size limit, the ratio check still catches it.
    with pytest.raises(ParseError) as e:
        open_archive(bomb, ParseLimits(max_unpacked_bytes=2 << 30))
    assert e.value.code is ParseErrorCode.TOO_LARGE and "limit is 200x" in e.value.message


def test_a_header_that_understates_a_member_gets_no_more_than_it_declares(gigabyte_of_zeros):
    # zipfile's own read() of such a member would inflate 1 GiB before cutting it to the declared 4,000 bytes.
    packed, _ = gigabyte_of_zeros
    for crc in (zlib.crc32(bytes(4000)), 0):  # a CRC that matches the declared 4,000 bytes, and one that does not
        lying = raw_zip(docx_shell((packed, crc, 4000)))
        open_archive(lying, LIMITS).close()  # the declared figures are harmless
        tracemalloc.start()
        start = time.perf_counter()
        with pytest.raises(ParseError) as e:
            docx_parser.parse(lying, LIMITS)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert e.value.code is ParseErrorCode.CORRUPT and time.perf_counter() - start < 2
        assert peak < 50_000_000
    with zipfile.ZipFile(safe_package(raw_zip(docx_shell((packed, zlib.crc32(bytes(4000)), 4000))), LIMITS)) as z:
        assert z.read("word/document.xml") == bytes(4000)


def test_too_many_parts_are_refused_quickly():
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as z:
        for i in range(20_000):
            z.writestr(f"word/p{i}.xml", b"")
    start = time.perf_counter()
    with pytest.raises(ParseError) as e:
        docx_parser.parse(buffer.getvalue(), LIMITS)
    assert e.value.code is ParseErrorCode.TOO_LARGE and time.perf_counter() - start < 1
    assert "20,000 parts" in e.value.message and "10,000" in e.value.message


def test_not_a_zip_is_corrupt_and_small_parts_may_compress_well():
    with pytest.raises(ParseError) as e:
        open_archive(b"PK\x03\x04 this is not really a zip", LIMITS)
    assert e.value.code is ParseErrorCode.CORRUPT
    xml = b"<w:p/>" * 100_000  # 600 KB that deflates about 1000x: below the size where ratios are checked
    open_archive(raw_zip([("word/document.xml", deflate(xml), zlib.crc32(xml), len(xml))]), LIMITS).close()
