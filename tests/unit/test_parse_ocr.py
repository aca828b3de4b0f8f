"""OCR of pages without a text layer (appliance/parse/ocr.py, pdf.py) with the real PP-OCRv4 models: real pages of
the SciFact and CMRC files rendered to images and made into image-only PDFs, as a scanner makes them."""
from __future__ import annotations

import asyncio
import difflib
import io
import struct
import zlib

import numpy as np
import pypdfium2 as pdfium
import pytest
from PIL import Image, ImageDraw

from appliance.models import build_models
from appliance.paths import model_folder
from appliance.parse import Format, ParseError, ParseErrorCode, ParseLimits, ParserPool, detect_format, parse_bytes
from appliance.parse.ocr import Line, order_lines, regions
from hostile_files import CMRC_FILES, SCIFACT_FILES, scan_of
from test_parse_pdf_text import make_pdf
from support import ROOT


@pytest.fixture(scope="module")
def ocr_limits() -> ParseLimits:
    build_models(ROOT / "models", names=["ppocr-v4"], log=lambda *_: None)
    return ParseLimits(ocr_models=str(model_folder(ROOT / "models", "ppocr-v4")))


def _similarity(a: str, b: str) -> float:
    a, b = "".join(a.split()), "".join(b.split())
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


@pytest.mark.parametrize("path", [SCIFACT_FILES / "10029970.pdf", CMRC_FILES / "DEV_1.pdf"],
                         ids=["english", "chinese"])
def test_a_scanned_page_is_read_with_its_page_number(ocr_limits, path):
    original = path.read_bytes()
    truth = parse_bytes(original)
    scan = scan_of(original)
    with pytest.raises(ParseError) as refused:
        parse_bytes(scan)  # OCR off: refused as before
    assert refused.value.code == ParseErrorCode.NO_TEXT_LAYER and "ocr_model" in refused.value.message
    doc = parse_bytes(scan, ocr_limits)
    assert doc.ocr_pages == (1,) and doc.pages == 1 and {b.page for b in doc.blocks} == {1}
    page_one = "".join(b.text for b in truth.blocks if b.page == 1)
    assert _similarity(page_one, doc.text) > 0.95, doc.text[:500]
    assert parse_bytes(original, ocr_limits).ocr_pages == ()  # a text layer is read as text, never by OCR


def test_only_the_pages_without_text_are_read_and_their_number_is_bounded(ocr_limits):
    text_page = SCIFACT_FILES / "10029970.pdf"
    blank = io.BytesIO()
    Image.new("L", (600, 800), 255).save(blank, "PDF", save_all=True, append_images=[Image.new("L", (600, 800), 255)])
    with pytest.raises(ParseError) as nothing:
        parse_bytes(blank.getvalue(), ocr_limits)
    assert nothing.value.code == ParseErrorCode.NO_TEXT_LAYER and "OCR found no text" in nothing.value.message
    limits = ParseLimits(ocr_models=ocr_limits.ocr_models, max_ocr_pages=1)
    with pytest.raises(ParseError) as many:  # a scan longer than the limit: refused, not read in part
        parse_bytes(blank.getvalue(), limits)
    assert many.value.code == ParseErrorCode.TOO_LARGE and "2 scanned pages" in many.value.message
    # a text document with a blank page and two scanned inserts: the blank page is not read (nothing drawn on it),
    # the first insert is, the one past the limit is left out; the document is not refused
    mixed = pdfium.PdfDocument(make_pdf([[(12, 72, 700, "Chapter one: the pumps.")], [],
                                         [(12, 72, 700, "Chapter two: the valves.")]]))
    mixed.import_pages(pdfium.PdfDocument(scan_of(text_page.read_bytes())))
    mixed.import_pages(pdfium.PdfDocument(scan_of((CMRC_FILES / "DEV_1.pdf").read_bytes())))
    out = io.BytesIO()
    mixed.save(out)
    doc = parse_bytes(out.getvalue(), limits)
    assert doc.pages == 5 and doc.ocr_pages == (4,), doc.ocr_pages
    assert {b.page for b in doc.blocks} == {1, 3, 4} and "Conserved Domain" in doc.text


def test_a_huge_page_is_rendered_at_a_bounded_size(ocr_limits):
    """A page of 200 x 200 inches (PDF's largest) with a few words: read at ~2000 px, not 14400 x 14400 points at
    240 dpi (a 48-gigapixel bitmap)."""
    image = Image.new("L", (1000, 1000), 255)
    ImageDraw.Draw(image).rectangle((100, 100, 400, 130), fill=0)  # a bar: no text, but something to detect
    out = io.BytesIO()
    image.save(out, "PDF", resolution=5)  # 1000 px at 5 dpi: 14400 points
    assert pdfium.PdfDocument(out.getvalue())[0].get_size()[0] == pytest.approx(14400)
    with pytest.raises(ParseError) as err:
        parse_bytes(out.getvalue(), ocr_limits)
    assert err.value.code == ParseErrorCode.NO_TEXT_LAYER


def test_ocr_runs_in_the_worker_pool_within_its_memory_limit(ocr_limits):
    scan = scan_of((CMRC_FILES / "DEV_1.pdf").read_bytes())

    async def go():
        async with ParserPool(1, timeout_s=120, max_memory_mib=2048, limits=ocr_limits) as pool:
            return await pool.parse(scan)

    doc = asyncio.run(go())
    assert doc.ocr_pages == (1,) and "锣鼓" in doc.text


def test_regions_join_diagonal_neighbours_and_average_their_probability():
    mask = np.zeros((6, 8), bool)
    mask[0, 0] = mask[1, 1] = mask[2, 2] = True  # a diagonal stroke: one region
    mask[4, 5:8] = True  # a separate run
    probability = np.where(mask, 0.9, 0.0)
    probability[4, 5:8] = [0.4, 0.6, 0.8]
    found = sorted(regions(mask, probability))
    assert found == [(0, 0, 3, 3, pytest.approx(0.9)), (4, 5, 5, 8, pytest.approx(0.6))]
    assert regions(np.zeros((3, 3), bool), np.zeros((3, 3))) == []


def test_reading_order_takes_a_title_then_each_column_top_to_bottom():
    def line(text, x0, y0, x1, y1):
        return Line(text, (x0, y0, x1, y1), 0.9)

    lines = [line("right 1", 520, 100, 900, 130), line("left 2", 100, 140, 480, 170), line("title", 100, 20, 900, 60),
             line("left 1", 100, 100, 480, 130), line("right 2", 520, 140, 900, 170),
             line("b", 620, 200, 900, 230), line("a", 100, 202, 600, 232)]  # a full-width row in two boxes
    assert [l.text for l in order_lines(lines)] == ["title", "left 1", "left 2", "right 1", "right 2", "a", "b"]


def _image(pdf: bytes, kind: str, dpi: int = 150, frames: int = 1) -> bytes:
    doc = pdfium.PdfDocument(pdf)
    page = doc[0].render(scale=dpi / 72).to_pil().convert("RGB")
    out = io.BytesIO()
    page.save(out, kind, save_all=frames > 1, append_images=[page] * (frames - 1))
    return out.getvalue()


@pytest.mark.parametrize("kind", ["PNG", "JPEG", "TIFF"])
def test_an_image_of_a_page_is_read(ocr_limits, kind):
    original = (SCIFACT_FILES / "10029970.pdf").read_bytes()
    data = _image(original, kind)
    assert detect_format(data) == Format(kind.lower())
    doc = parse_bytes(data, ocr_limits)
    assert doc.format == Format(kind.lower()) and doc.ocr_pages == (1,) and doc.pages is None
    page_one = "".join(b.text for b in parse_bytes(original).blocks if b.page == 1)
    assert _similarity(page_one, doc.text) > 0.9, doc.text[:500]
    with pytest.raises(ParseError) as off:
        parse_bytes(data)
    assert off.value.code == ParseErrorCode.NO_TEXT_LAYER and "parse.ocr_model is off" in off.value.message


def test_a_multi_page_tiff_gives_pages_and_its_frames_are_bounded(ocr_limits):
    original = (CMRC_FILES / "DEV_1.pdf").read_bytes()
    doc = parse_bytes(_image(original, "TIFF", dpi=100, frames=2), ocr_limits)
    assert doc.pages == 2 and doc.ocr_pages == (1, 2) and {b.page for b in doc.blocks} == {1, 2}
    many = io.BytesIO()
    tiny = Image.new("L", (8, 8), 255)
    tiny.save(many, "TIFF", save_all=True, append_images=[tiny] * 999)
    with pytest.raises(ParseError) as err:
        parse_bytes(many.getvalue(), ocr_limits)
    assert err.value.code == ParseErrorCode.TOO_LARGE and "1000 pages" in err.value.message


def test_image_bombs_and_broken_images_are_refused_before_decoding(ocr_limits):
    with pytest.raises(ParseError) as err:  # 10 gigapixels claimed in 60 bytes: 30 GB if it were decoded
        parse_bytes(_png_claiming(100_000, 100_000), ocr_limits)
    assert err.value.code == ParseErrorCode.TOO_LARGE and "100000 x 100000 pixels" in err.value.message
    good = _image((SCIFACT_FILES / "10029970.pdf").read_bytes(), "PNG", dpi=72)
    for broken in (good[:len(good) // 2], good[:40], b"\xff\xd8\xff" + bytes(500), b"II*\x00" + bytes(100)):
        with pytest.raises(ParseError) as err:
            parse_bytes(broken, ocr_limits)
        assert err.value.code in (ParseErrorCode.CORRUPT, ParseErrorCode.NO_TEXT_LAYER), err.value


def _png_claiming(width: int, height: int) -> bytes:
    """A PNG whose header says width x height (RGB) and whose data is a few bytes."""
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(bytes(64)))
            + chunk(b"IEND", b""))


def test_a_photo_stored_sideways_is_read_upright_as_its_exif_says(ocr_limits):
    page = pdfium.PdfDocument((SCIFACT_FILES / "10029970.pdf").read_bytes())[0].render(scale=2).to_pil()
    sideways = page.convert("RGB").transpose(Image.Transpose.ROTATE_90)  # what the sensor recorded
    exif = Image.Exif()
    exif[0x0112] = 6  # Orientation: rotate 90 degrees clockwise to view
    out = io.BytesIO()
    sideways.save(out, "JPEG", exif=exif)
    doc = parse_bytes(out.getvalue(), ocr_limits)
    assert "Conserved Domain Database" in doc.text, doc.text[:300]
