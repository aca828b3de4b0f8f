"""Text from page images: PP-OCRv4's text detector and recogniser (ONNX, from the rapidocr-onnxruntime wheel's
models; English and Chinese), run with the box's onnxruntime in the parse worker, one thread each (a worker is one
core's work).

Detection gives a text probability per pixel at <= `_DET_SIDE` px; pixels over `_DET_THRESHOLD` are grouped into
connected regions (numpy run-lengths and a union-find), each region's box is grown as PP-OCR's "unclip" does (the
detector is trained on shrunk text regions) and cut from the full-size page. The recogniser reads each crop at 48 px
high, in batches of similar widths; CTC's greedy path gives the text. Lines are read in XY-cut order (columns,
titles); the PDF parser's own layout rules make paragraphs of them.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import pdf_layout

OCR_RENDER_SIDE = 2000  # px on a page's long side: ~240 dpi for A4, where 10-point text is ~33 px high
_DET_SIDE = 1280  # the detector's input, longest side (a multiple of 32); a page rendered at ~2000 px
_DET_THRESHOLD, _BOX_THRESHOLD = 0.3, 0.5  # pixel probability; a region's mean probability
_UNCLIP = 1.6  # PP-OCR's ratio: area * ratio / perimeter added on every side
_REC_HEIGHT, _REC_BATCH, _REC_MAX_WIDTH = 48, 8, 3200
_MIN_CONFIDENCE = 0.5  # a line whose characters the recogniser is less sure of on average is left out
_BODY_SIZE = 10.0  # points: what a page's body text counts as, whatever its scan's resolution


@dataclass(slots=True, frozen=True)
class Line:
    text: str
    box: tuple[int, int, int, int]  # x0, y0, x1, y1 in the page image's pixels
    confidence: float


class PageReader:
    """Reads text from RGB page images (uint8, height x width x 3). Sessions load on first use."""

    def __init__(self, models_dir: Path):
        self._dir = Path(models_dir)
        self._graphs: dict[str, bytes] = {}
        self._det = self._rec = None
        self._chars: list[str] = []

    def preload(self) -> None:
        """Reads the graphs' bytes and imports onnxruntime now: a parse worker does this before it is confined to
        the installation (confine.py), where the models folder may be out of its reach; sessions are made from the
        bytes on the first page read (15 MB held per worker until then)."""
        import onnxruntime  # noqa: F401

        for name in ("det.onnx", "rec.onnx"):
            self._graphs[name] = (self._dir / name).read_bytes()

    def read(self, image: np.ndarray) -> list[Line]:
        """The page's lines in reading order."""
        self._load()
        boxes = self._detect(image)
        return order_lines([line for line in self._recognise(image, boxes) if line.text.strip()])

    def _load(self) -> None:
        if self._det is not None:
            return
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = 1
        if not self._graphs:
            self.preload()
        det, rec = self._graphs.pop("det.onnx"), self._graphs.pop("rec.onnx")
        self._det = ort.InferenceSession(det, options, providers=["CPUExecutionProvider"])
        self._rec = ort.InferenceSession(rec, options, providers=["CPUExecutionProvider"])
        alphabet = self._rec.get_modelmeta().custom_metadata_map["character"].splitlines()
        self._chars = ["", *alphabet, " "]  # CTC's blank first; PP-OCR appends the space

    def _detect(self, image: np.ndarray) -> list[tuple[int, int, int, int]]:
        h, w = image.shape[:2]
        scale = min(1.0, _DET_SIDE / max(h, w))
        dh, dw = max(32, round(h * scale / 32) * 32), max(32, round(w * scale / 32) * 32)
        probability = self._det.run(None, {"x": _normalised(resize(image, dw, dh))[None]})[0][0, 0]
        mask = probability > _DET_THRESHOLD
        mask[1:, 1:] |= mask[:-1, :-1]  # a 2x2 dilation: joins characters a pixel apart
        boxes = []
        for y0, x0, y1, x1, mean in regions(mask, probability):
            bw, bh = x1 - x0, y1 - y0
            if min(bw, bh) < 3 or mean < _BOX_THRESHOLD:
                continue
            grow = bw * bh * _UNCLIP / (2 * (bw + bh))
            boxes.append((max(0, int((x0 - grow) * w / dw)), max(0, int((y0 - grow) * h / dh)),
                          min(w, int((x1 + grow) * w / dw + 1)), min(h, int((y1 + grow) * h / dh + 1))))
        return boxes

    def _recognise(self, image: np.ndarray, boxes: list[tuple[int, int, int, int]]) -> list[Line]:
        crops = []
        for box in boxes:
            x0, y0, x1, y1 = box
            width = min(_REC_MAX_WIDTH, max(8, round((x1 - x0) * _REC_HEIGHT / max(1, y1 - y0))))
            crops.append((width, box))
        crops.sort()
        lines = []
        for start in range(0, len(crops), _REC_BATCH):
            batch = crops[start:start + _REC_BATCH]
            widest = batch[-1][0]
            tensor = np.zeros((len(batch), 3, _REC_HEIGHT, widest), np.float32)
            for i, (width, (x0, y0, x1, y1)) in enumerate(batch):
                tensor[i, :, :, :width] = _normalised(resize(image[y0:y1, x0:x1], width, _REC_HEIGHT))
            for (_, box), probs in zip(batch, self._rec.run(None, {"x": tensor})[0]):
                text, confidence = ctc_greedy(probs, self._chars)
                if confidence >= _MIN_CONFIDENCE:
                    lines.append(Line(text, box, confidence))
        return lines


@functools.cache
def reader(models_dir: str) -> PageReader:
    """The worker's one reader per models folder: its sessions load once, on the first page read."""
    return PageReader(Path(models_dir))


def layout_lines(lines: list[Line], page: int, scale: float, height_px: int,
                 body_size: float | None = None) -> list[pdf_layout.Line]:
    """OCR lines as the PDF layout's lines (units of 1/scale px, y upwards), so that paragraphs, headings and page
    furniture are found by the same rules as in a text layer. Sizes are per page, relative to its body (the lower
    median box height) at `body_size` (the text layer's, in a document that has one): pages scanned at other
    resolutions compare, and a line counts as larger only past 30 % (a box's height varies with its letters:
    descenders, capitals). Its middle stands for the baseline, which its letters do not move."""
    body_size = body_size or _BODY_SIZE
    heights = sorted(line.box[3] - line.box[1] for line in lines)
    body = max(1, heights[(len(heights) - 1) // 2]) if heights else 1
    laid = []
    for line in lines:
        x0, y0, x1, y1 = line.box
        size = body_size if abs((y1 - y0) - body) <= 0.3 * body else body_size * (y1 - y0) / body
        laid.append(pdf_layout.Line(line.text, page, size, (height_px - (y0 + y1) / 2) / scale, x0 / scale,
                                    x1 / scale, False))
    return laid


def _normalised(image: np.ndarray) -> np.ndarray:
    """uint8 HxWx3 -> float32 3xHxW in [-1, 1], as PP-OCR was trained."""
    return (image.astype(np.float32) * (2 / 255) - 1).transpose(2, 0, 1)


def resize(image: np.ndarray, width: int, height: int) -> np.ndarray:
    """An HxWx3 uint8 image at width x height (Pillow's bilinear filter, which averages when it shrinks)."""
    from PIL import Image

    return np.asarray(Image.fromarray(image).resize((width, height), Image.BILINEAR))


def regions(mask: np.ndarray, probability: np.ndarray) -> list[tuple[int, int, int, int, float]]:
    """8-connected regions of `mask`: (y0, x0, y1, x1, mean probability) each, ends exclusive. Runs of set pixels
    per row are joined with the overlapping runs of the row above through a union-find."""
    h, w = mask.shape
    edges = np.diff(np.pad(mask, ((0, 0), (1, 1))).astype(np.int8), axis=1)
    rows, starts = np.nonzero(edges == 1)
    _, ends = np.nonzero(edges == -1)  # same order: each run's start is followed by its end on that row
    if not len(rows):
        return []
    sums = np.pad(np.cumsum(np.where(mask, probability, 0), axis=1), ((0, 0), (1, 0)))
    run_sums = sums[rows, ends] - sums[rows, starts]
    parent = list(range(len(rows)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    first = np.searchsorted(rows, np.arange(h + 1))  # runs of row r: first[r] .. first[r + 1]
    for r in range(1, h):
        a, a_end, b, b_end = first[r - 1], first[r], first[r], first[r + 1]
        while a < a_end and b < b_end:  # two sorted run lists; 8-connected: touching diagonally counts
            if starts[a] <= ends[b] and starts[b] <= ends[a]:
                ra, rb = find(a), find(b)
                if ra != rb:
                    parent[rb] = ra
            if ends[a] < ends[b]:
                a += 1
            else:
                b += 1
    roots = np.array([find(i) for i in range(len(rows))])
    labels, index = np.unique(roots, return_inverse=True)
    return _boxes(len(labels), index, rows, starts, ends, run_sums)


def _boxes(n, index, rows, starts, ends, run_sums) -> list[tuple[int, int, int, int, float]]:
    y0, x0 = np.full(n, np.iinfo(np.int64).max), np.full(n, np.iinfo(np.int64).max)
    y1, x1 = np.zeros(n, np.int64), np.zeros(n, np.int64)
    np.minimum.at(y0, index, rows)
    np.minimum.at(x0, index, starts)
    np.maximum.at(y1, index, rows + 1)
    np.maximum.at(x1, index, ends)
    pixels, total = np.zeros(n), np.zeros(n)
    np.add.at(pixels, index, ends - starts)
    np.add.at(total, index, run_sums)
    return [(int(y0[i]), int(x0[i]), int(y1[i]), int(x1[i]), float(total[i] / pixels[i])) for i in range(n)]


def ctc_greedy(probs: np.ndarray, chars: list[str]) -> tuple[str, float]:
    """The best path: argmax per step, repeats merged, blanks dropped; the mean probability of the kept steps."""
    best = probs.argmax(axis=1)
    keep = (best != 0) & np.concatenate(([True], best[1:] != best[:-1]))
    if not keep.any():
        return "", 0.0
    text = "".join(chars[i] if i < len(chars) else "" for i in best[keep])
    return text, float(probs.max(axis=1)[keep].mean())


def order_lines(lines: list[Line]) -> list[Line]:
    """Reading order by recursive XY cuts: the page is split at its widest empty band, across (a gap between
    paragraphs, or under a full-width title) or down (the gutter between columns), and each part read in turn;
    what no band splits is read row by row."""
    order: list[Line] = []
    stack = [lines]
    while stack:  # depth first, parts pushed last-first: no recursion, whatever the page holds
        group = stack.pop()
        parts = _cut(group)
        if parts is None:
            order.extend(_rows(group))
        else:
            stack.extend(reversed(parts))
    return order


def _cut(lines: list[Line]) -> list[list[Line]] | None:
    """`lines` split at the widest gap of their boxes' projections on y (axis 1) or x (axis 0); None if none."""
    if len(lines) < 2:
        return None
    best = None
    for axis in (1, 0):
        spans = sorted((line.box[axis], line.box[axis + 2]) for line in lines)
        reach = spans[0][1]
        for start, end in spans[1:]:
            if start > reach and (best is None or start - reach > best[0]):
                best = (start - reach, axis, (reach + start) / 2)
            reach = max(reach, end)
    if best is None:
        return None
    _, axis, at = best
    before = [line for line in lines if line.box[axis + 2] <= at]
    return [before, [line for line in lines if line.box[axis + 2] > at]]


def _rows(lines: list[Line]) -> list[Line]:
    """Top to bottom; boxes that share most of their height are one row, read left to right."""
    rows: list[list[Line]] = []
    for line in sorted(lines, key=lambda l: (l.box[1] + l.box[3]) / 2):
        x0, y0, x1, y1 = line.box
        if rows:
            top, bottom = min(l.box[1] for l in rows[-1]), max(l.box[3] for l in rows[-1])
            if min(y1, bottom) - max(y0, top) > 0.5 * min(y1 - y0, bottom - top):
                rows[-1].append(line)
                continue
        rows.append([line])
    return [line for row in rows for line in sorted(row, key=lambda l: l.box[0])]
