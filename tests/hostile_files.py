"""Bad files made on the spot, for the tests that check a bad file is refused with its reason while the others
of the same request are stored: a scan without a text layer, an encrypted PDF, zip bombs, truncated files."""
from __future__ import annotations

import io
import zipfile

from support import DATA

SCIFACT_FILES = DATA / "scifact_files" / "files"
CMRC_FILES = DATA / "cmrc_files" / "files"


def scanned_pdf() -> bytes:
    """A page that is only a picture (what a scanner makes) with nothing readable on it: no text layer, and OCR
    finds none. A scan with text: `scan_of`."""
    from PIL import Image

    image = Image.new("RGB", (600, 800), "white")  # a blank sheet fed to the scanner
    out = io.BytesIO()
    image.save(out, "PDF")
    return out.getvalue()


def scan_of(pdf: bytes, pages: int = 1, dpi: int = 200) -> bytes:
    """The PDF's first `pages` pages rendered to grey images at `dpi`, saved as an image-only PDF: a scan of it."""
    import pypdfium2 as pdfium

    doc = pdfium.PdfDocument(pdf)
    images = [doc[i].render(scale=dpi / 72).to_pil().convert("L") for i in range(min(pages, len(doc)))]
    out = io.BytesIO()
    images[0].save(out, "PDF", resolution=dpi, save_all=True, append_images=images[1:])
    return out.getvalue()


def encrypted_pdf(source: bytes, password: str = "secret") -> bytes:
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter()
    for page in PdfReader(io.BytesIO(source)).pages:
        writer.add_page(page)
    writer.encrypt(user_password=password, owner_password=password + "-owner")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def zip_bomb_docx(unpacked_mib: int = 1024) -> bytes:
    """A DOCX-shaped zip whose one big part unpacks to `unpacked_mib` MiB of zeros (about 1 MiB packed per GiB)."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("[Content_Types].xml", "<Types/>")
        with z.open("word/document.xml", "w", force_zip64=True) as part:
            block = b"\0" * (1 << 20)
            for _ in range(unpacked_mib):
                part.write(block)
    return out.getvalue()


def many_parts_docx(parts: int = 20_000) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as z:
        z.writestr("word/document.xml", "<w:document/>")
        for i in range(parts):
            z.writestr(f"word/media/p{i}.xml", "")
    return out.getvalue()


def truncated(data: bytes, keep: float = 0.5) -> bytes:
    return data[:int(len(data) * keep)]


def png() -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (8, 8), "red").save(out, "PNG")
    return out.getvalue()
