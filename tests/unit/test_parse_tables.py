"""Tables kept as tables: each parser marks a table's heading lines (caption, header rows), and the chunker gives a
table chunks of whole rows, each beginning with that heading, so a row is found with its column names."""
from __future__ import annotations

import io

import docx
from docx.oxml import OxmlElement
import pptx
from pptx.util import Inches

from appliance.config import ChunkSettings
from appliance.parse import Block, ParseLimits, parse_bytes
from appliance.parse.document import table_block
from appliance.text import chunk_blocks

LIMITS = ParseLimits()
HEADER = ["Model", "Flow (l/min)", "Price (EUR)"]
ROWS = [[f"Pump P-{i:03d}", str(10 + i), str(200 + 5 * i)] for i in range(120)]


def catalogue_docx(rows: list[list[str]], marked: int) -> bytes:
    """A report with a paragraph, then a table whose first `marked` rows repeat on each page (w:tblHeader)."""
    d = docx.Document()
    d.add_heading("Pump catalogue", level=1)
    d.add_heading("Prices", level=2)
    d.add_paragraph("Every pump we sell, with its flow and its price.")
    table = d.add_table(rows=len(rows), cols=len(rows[0]))
    for r, row in enumerate(rows):
        for c, value in enumerate(row):
            table.cell(r, c).text = value
        if r < marked:
            trpr = table.rows[r]._tr.get_or_add_trPr()
            trpr.append(OxmlElement("w:tblHeader"))
    d.add_paragraph("Prices include delivery.")
    out = io.BytesIO()
    d.save(out)
    return out.getvalue()


def test_docx_table_rows_under_their_header_row_and_section():
    doc = parse_bytes(catalogue_docx([HEADER, *ROWS[:3]], marked=0), LIMITS)
    table = [b for b in doc.blocks if b.is_table]
    assert len(table) == 1 and table[0].header == 1 and table[0].section == ("Prices",)
    assert table[0].text.split("\n") == ["Model | Flow (l/min) | Price (EUR)", "Pump P-000 | 10 | 200",
                                         "Pump P-001 | 11 | 205", "Pump P-002 | 12 | 210"]
    assert [b.is_table for b in doc.blocks] == [False, True, False]


def test_docx_rows_marked_to_repeat_on_each_page_are_the_header():
    rows = [["Pump catalogue 2026", "", ""], HEADER, *ROWS[:3]]
    doc = parse_bytes(catalogue_docx(rows, marked=2), LIMITS)
    (table,) = [b for b in doc.blocks if b.is_table]
    assert table.header == 2 and table.text.split("\n")[:2] == ["Pump catalogue 2026 |  | ", HEADER[0] + " | " +
                                                                 HEADER[1] + " | " + HEADER[2]]


def test_a_nested_docx_table_stays_inside_its_cell_row():
    d = docx.Document()
    outer = d.add_table(rows=2, cols=2)
    outer.cell(0, 0).text, outer.cell(0, 1).text = "Part", "Sizes"
    outer.cell(1, 0).text = "Valve"
    inner = outer.cell(1, 1).add_table(rows=2, cols=2)
    for (r, c), value in zip([(0, 0), (0, 1), (1, 0), (1, 1)], ["S", "10 mm", "L", "20 mm"]):
        inner.cell(r, c).text = value
    out = io.BytesIO()
    d.save(out)
    (table,) = parse_bytes(out.getvalue(), LIMITS).blocks
    assert table.text.split("\n") == ["Part | Sizes", "Valve | S | 10 mm ; L | 20 mm"] and table.header == 1


def test_html_header_rows_from_thead_or_th_cells_and_the_caption():
    html = """<html><head><title>Fees</title></head><body><h2>Fees</h2><p>What each service costs.</p>
    <table><caption>Fees from 1 January</caption>
      <thead><tr><th colspan="2">Service</th></tr><tr><th>Name</th><th>Fee</th></tr></thead>
      <tbody><tr><td>Passport</td><td>80</td></tr><tr><td>Licence</td><td>45</td></tr></tbody></table>
    <table><tr><th>Port</th><th>Use</th></tr><tr><td>22</td><td>ssh</td></tr></table>
    <table><tr><td>Key</td><td>Value</td></tr><tr><td>colour</td><td>red</td></tr></table>
    </body></html>"""
    tables = [b for b in parse_bytes(html.encode(), LIMITS).blocks if b.is_table]
    assert [(b.text.split("\n"), b.header) for b in tables] == [
        (["Fees from 1 January", "Service", "Name | Fee", "Passport | 80", "Licence | 45"], 3),
        (["Port | Use", "22 | ssh"], 1),
        (["Key | Value", "colour | red"], 1),  # no header marked: its first row
    ]


def test_markdown_table_has_its_header_row():
    text = "# Ports\n\nWhich port is which.\n\n| Port | Use |\n|---|---|\n| 22 | ssh |\n| 443 | https |\n"
    (prose, table) = parse_bytes(text.encode(), LIMITS).blocks
    assert not prose.is_table and table.header == 1 and table.text == "Port | Use\n22 | ssh\n443 | https"


def _deck(first_row: bool) -> bytes:
    deck = pptx.Presentation()
    slide = deck.slides.add_slide(deck.slide_layouts[5])
    slide.shapes.title.text = "Sales"
    table = slide.shapes.add_table(3, 2, Inches(1), Inches(2), Inches(4), Inches(1)).table
    table.first_row = first_row
    for (r, c), value in zip([(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1)],
                             ["Region", "Sales", "North", "42", "South", "17"]):
        table.cell(r, c).text = value
    out = io.BytesIO()
    deck.save(out)
    return out.getvalue()


def test_pptx_table_header_row_as_powerpoint_marks_it():
    (on,) = [b for b in parse_bytes(_deck(True), LIMITS).blocks if b.is_table]
    (off,) = [b for b in parse_bytes(_deck(False), LIMITS).blocks if b.is_table]
    assert on.text == off.text == "Region | Sales\nNorth | 42\nSouth | 17"
    assert (on.header, on.page) == (1, 1) and off.header == 0


def test_a_table_of_headings_alone_is_text():
    assert table_block([["Name", "Fee"]], 1) == Block("Name | Fee")
    assert table_block([["", ""], ["Name", "Fee"], ["a", "1"]], 1) == Block("Name | Fee\na | 1", header=0)
    assert table_block([["", ""]], 1) is None


def test_a_long_table_is_chunked_in_whole_rows_each_under_its_header():
    doc = parse_bytes(catalogue_docx([HEADER, *ROWS], marked=0), LIMITS)
    limits = ChunkSettings()
    chunks = chunk_blocks(doc.blocks, limits)
    table_chunks = [c for c in chunks if c.text.startswith("Model | ")]
    assert len(table_chunks) >= 3
    seen = []
    for chunk in table_chunks:
        lines = chunk.text.split("\n")
        assert lines[0] == " | ".join(HEADER) and chunk.section == ("Prices",)
        assert len(chunk.text.split()) <= limits.max_words and len(chunk.text) <= limits.max_chars
        seen += lines[1:]
    assert seen == [" | ".join(row) for row in ROWS]  # every row once, whole, in order
    # the prose around it stays prose, in chunks of its own
    assert [c.text for c in chunks if c not in table_chunks] == [
        "Every pump we sell, with its flow and its price.", "Prices include delivery."]


def test_before_tables_were_blocks_their_rows_ran_together():
    """The same table as one prose block (what the parsers made before): its later chunks have no header and rows
    are joined by spaces. Guards the test above against passing for the wrong reason."""
    doc = parse_bytes(catalogue_docx([HEADER, *ROWS], marked=0), LIMITS)
    prose = [Block(b.text, b.page, b.section) for b in doc.blocks]
    chunks = chunk_blocks(prose, ChunkSettings())
    assert sum(c.text.startswith("Model | ") for c in chunks) == 1 and all("\n" not in c.text for c in chunks)


def test_a_row_longer_than_a_chunk_is_cut_and_each_piece_keeps_the_header():
    long_row = ["Pump X", "word " * 400, "999"]
    block = table_block([HEADER, ROWS[0], long_row, ROWS[1]], 1)
    limits = ChunkSettings()
    chunks = chunk_blocks([block], limits)
    assert all(c.text.startswith(" | ".join(HEADER) + "\n") for c in chunks) and len(chunks) >= 3
    assert all(len(c.text.split()) <= limits.max_words and len(c.text) <= limits.max_chars for c in chunks)
    assert " ".join(c.text.split("\n", 1)[1] for c in chunks).split() == " ".join(
        " | ".join(r) for r in [ROWS[0], long_row, ROWS[1]]).split()


def test_a_header_too_large_to_repeat_is_kept_once_as_rows():
    wide = [f"Column {i}" for i in range(60)]  # 120 words of header: more than half of 180
    block = table_block([wide, *[[str(i)] * 60 for i in range(10)]], 1)
    chunks = chunk_blocks([block], ChunkSettings())
    assert sum(c.text.startswith("Column 0 |") for c in chunks) == 1 and len(chunks) > 1


def test_a_chinese_table_is_measured_in_characters():
    rows = [["城市", "人口（万）"], *[[f"城市{i}号", str(100 + i)] for i in range(80)]]
    limits = ChunkSettings()
    chunks = chunk_blocks([table_block(rows, 1, section=("人口",))], limits)
    assert len(chunks) > 1 and all(c.text.startswith("城市 | 人口（万）\n") for c in chunks)
    assert all(len(c.text) <= limits.max_chars_cjk for c in chunks)
    assert [line for c in chunks for line in c.text.split("\n")[1:]] == [" | ".join(r) for r in rows[1:]]
