"""PNG, JPEG and TIFF files (scans, photographed pages): their text read by OCR, each TIFF frame a page.

The header's dimensions are checked before a pixel is decoded (an image bomb claims 100,000 x 100,000 pixels in a
few bytes), the frames counted against the OCR page limit, and a large image is shrunk to about the pixels a page
is rendered at for OCR before it is read.
"""
from __future__ import annotations

import io

import numpy as np

from .document import Block, Format, ParsedDocument, ParseError, ParseErrorCode, ParseLimits
from .ocr import OCR_RENDER_SIDE, layout_lines, reader
from .pdf_layout import assemble_paragraphs

_FORMATS = {"PNG": Format.PNG, "JPEG": Format.JPEG, "TIFF": Format.TIFF}
_READ_PIXELS = OCR_RENDER_SIDE * OCR_RENDER_SIDE * 3 // 4  # an A4 page rendered for OCR, ~3 megapixels


def parse(data: bytes, limits: ParseLimits) -> ParsedDocument:
    if not limits.ocr_models:
        raise ParseError(ParseErrorCode.NO_TEXT_LAYER, "an image: its text needs OCR (parse.ocr_model is off)")
    from PIL import Image

    Image.MAX_IMAGE_PIXELS = None  # checked below, per frame, against our own limit and before decoding
    with Image.open(io.BytesIO(data)) as image:
        fmt = _FORMATS.get(image.format or "")
        if fmt is None:
            raise ParseError(ParseErrorCode.UNSUPPORTED, f"unsupported image format {image.format}")
        frames = getattr(image, "n_frames", 1)
        if frames > limits.max_ocr_pages:
            raise ParseError(ParseErrorCode.TOO_LARGE, f"the image has {frames} pages (the most read by OCR in one "
                                                       f"file: {limits.max_ocr_pages})")
        lines = []
        for index in range(frames):
            image.seek(index)
            width, height = image.size
            if width * height > limits.max_image_pixels:
                raise ParseError(ParseErrorCode.TOO_LARGE, f"the image is {width} x {height} pixels (limit "
                                                           f"{limits.max_image_pixels:,} pixels)")
            pixels = _for_reading(image)
            lines += layout_lines(reader(limits.ocr_models).read(pixels), index + 1, 1.0, pixels.shape[0])
    blocks = [Block(p.text, p.page if frames > 1 else None) for p in assemble_paragraphs(lines)]
    return ParsedDocument(fmt, "", blocks, pages=frames if frames > 1 else None,
                          ocr_pages=tuple(range(1, frames + 1)))


def _for_reading(image) -> np.ndarray:
    """RGB pixels, upright as the camera's EXIF orientation says (phones store photos sideways and say so), shrunk
    to about `_READ_PIXELS` when larger (a 12-megapixel photo of a page reads as well at 3)."""
    from PIL import Image, ImageOps

    frame = ImageOps.exif_transpose(image).convert("RGB")
    scale = (_READ_PIXELS / (frame.width * frame.height)) ** 0.5
    if scale < 1:
        frame = frame.resize((max(1, round(frame.width * scale)), max(1, round(frame.height * scale))),
                             Image.BILINEAR)
    return np.asarray(frame)
