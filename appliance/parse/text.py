"""Plain text: decoding bytes of unknown encoding (BOMs, UTF-8, Chinese legacy encodings, the rest), and the parser.

Short Chinese texts fool statistical detectors (charset-normalizer calls a GB18030 title cp949, cp874 or Big5 about
half the time), so GB18030 and Big5 are tried first and judged by how common the characters they decode to are.
"""
from __future__ import annotations

import re

from .document import Block, Format, ParsedDocument, ParseError, ParseErrorCode, ParseLimits

_BOMS = ((b"\xef\xbb\xbf", "utf-8-sig", "utf-8-sig"), (b"\xff\xfe\x00\x00", "utf-32-le", "utf-32-le"),
         (b"\x00\x00\xfe\xff", "utf-32-be", "utf-32-be"), (b"\xff\xfe", "utf-16-le", "utf-16-le"),
         (b"\xfe\xff", "utf-16-be", "utf-16-be"))
# Decoders tried for legacy Chinese, the supersets first; a Big5 file that strict big5 refuses may still be cp950.
_CHINESE = ("gb18030", "big5", "cp950", "big5hkscs")
_CHINESE_NAMES = {"gb2312", "gbk", "gb18030", "hz", "big5", "big5hkscs", "cp950", "cp936"}
_SAMPLE = 4000  # non-ASCII characters scored per candidate: enough to decide, bounded on huge files
_SURE_CHINESE, _LIKELY_CHINESE = 0.8, 0.5
_OTHER_CJK = {"cp949", "euc_kr", "johab", "iso2022_kr", "shift_jis", "shift_jis_2004", "shift_jisx0213", "cp932",
              "euc_jp", "euc_jis_2004", "euc_jisx0213", "iso2022_jp"}

# Scripts written without spaces between words (Hangul is not: Korean puts spaces between words).
NO_SPACE_CHARS = ("\u2e80-\u2fdf\u3000-\u303f\u3040-\u30ff\u3100-\u312f\u31a0-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
                  "\uf900-\ufaff\ufe30-\ufe4f\uff00-\uffef\U00020000-\U0003134f")
_NO_SPACE_CHAR = re.compile(f"[{NO_SPACE_CHARS}]")
_HANZI = re.compile("[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003134f]")
_KANA = re.compile("[\u3040-\u30ff]")
_HANZI_SPACED = re.compile("[\u4e00-\u9fff] [\u4e00-\u9fff]")
_CONTROLS = re.compile("[\x00-\x08\x0e-\x1f\x7f]")
_SPACES = re.compile(r"[^\S\n]+")
_BLANK_LINE = re.compile(r"\n[^\S\n]*\n")
_MAX_TITLE = 200
_CONTINUES = (",", ";", ":", "-", "\u2013", "\u2014", "\uff0c", "\u3001", "\uff1b", "\uff1a", "(", "[")


def decode_text(data: bytes) -> tuple[str, str]:
    """The text and the name of the encoding it was decoded from; ParseError(UNSUPPORTED) when nothing fits."""
    for bom, codec, name in _BOMS:
        if data.startswith(bom):
            try:
                return data.decode(codec).lstrip("\ufeff"), name
            except UnicodeDecodeError:
                break  # a BOM followed by something else: judge the bytes on their own
    try:
        return data.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        pass
    best, foreign = _best_chinese(data)
    chinese = best[2] if best else 0.0
    if best and not foreign and chinese >= _SURE_CHINESE:
        return best[0], best[1]
    guessed = _charset_normalizer_guess(data)
    # On short Chinese text its Korean and Japanese guesses are mostly wrong: not trusted over a likely Chinese reading.
    if guessed and (foreign or not (chinese >= _LIKELY_CHINESE and guessed[1].replace("-", "_") in _OTHER_CJK)):
        return guessed
    if best and not _CONTROLS.search(best[0]):
        return best[0], best[1]  # nothing better: a strict GB18030/Big5 reading, rare characters and all
    raise ParseError(ParseErrorCode.UNSUPPORTED, "unsupported format: binary or undecodable text (unknown encoding)")


def _best_chinese(data: bytes) -> tuple[tuple[str, str, float] | None, bool]:
    """The Chinese decoding whose characters are the most common, with its score, and whether the bytes rather look
    Korean or Japanese."""
    best: tuple[str, str, float] | None = None
    foreign = False
    for codec in _CHINESE:
        if codec in ("cp950", "big5hkscs") and best and best[1] == "big5":
            continue  # big5 already read it: its supersets would only tie
        try:
            text = data.decode(codec)
        except UnicodeDecodeError:
            continue
        if codec == "gb18030":
            foreign = not _reads_as_chinese(text)
        score = chinese_score(text)
        if best is None or score > best[2]:  # ties keep the earlier (gb18030, the superset of GBK and GB2312)
            best = (text, codec, score)
    return best, foreign


def chinese_score(text: str) -> float:
    """Mean commonness of the non-ASCII characters, 0..1: a wrong Chinese decoding yields rare characters and symbols.

    Common = in GB2312 level 1 or Big5's frequently-used block (the codecs are the frequency tables), or CJK
    punctuation and full-width forms. Level-2 characters count half; anything else (kana, box drawing, private use,
    rare ideographs) counts nothing.
    """
    total = points = 0.0
    for ch in text:
        if ch < "\x80":
            continue
        total += 1
        points += _commonness(ch)
        if total >= _SAMPLE:
            break
    return points / total if total else 0.0


def _commonness(ch: str) -> float:
    if "\u3000" <= ch <= "\u303f" or "\uff01" <= ch <= "\uff5e" or "\u2010" <= ch <= "\u2027" or ch == "\u00b7":
        return 1.0
    if not _HANZI.match(ch):
        return 0.0
    score = 0.0
    try:
        gb = ch.encode("gb2312")
        score = 1.0 if gb[0] <= 0xD7 else 0.5  # level 1 is rows 0xB0-0xD7
    except UnicodeEncodeError:
        pass
    try:
        b5 = ch.encode("big5")
        score = max(score, 1.0 if b5 < b"\xc6\x7f" else 0.5)  # frequently used: 0xA440-0xC67E
    except UnicodeEncodeError:
        pass
    return score


def _reads_as_chinese(text: str) -> bool:
    """False for GB18030 readings of Korean and Japanese, which also yield common hanzi.

    EUC-KR Hangul lands on GB2312 level-1 hanzi, but in space-separated words, which Chinese does not have. EUC-JP
    kana lands on GB2312's own kana rows: 40-70% kana, where Big5 read as GB gives at most ~25%.
    """
    sample = text[:20_000]
    hanzi = len(_HANZI.findall(sample))
    spaced = len(_HANZI_SPACED.findall(sample))
    kana = len(_KANA.findall(sample))
    non_ascii = sum(1 for ch in sample if ch >= "\x80")
    return not (spaced >= 3 and spaced > 0.15 * hanzi) and not (kana >= 3 and kana > 0.35 * non_ascii)


def _charset_normalizer_guess(data: bytes) -> tuple[str, str] | None:
    from charset_normalizer import from_bytes  # imported here: only legacy-encoded files need it

    results = from_bytes(data)
    match = results.best()
    if match is None or match.encoding is None:
        return None
    codec = match.encoding
    if any(m.encoding == "cp1252" and (m.chaos, m.coherence) == (match.chaos, match.coherence) for m in results):
        codec = "cp1252"  # a tie, which it breaks by name order: the Western code page is by far the commonest
    if codec.replace("-", "_") in _CHINESE_NAMES or codec.startswith(("utf_16", "utf_32", "utf-16", "utf-32")):
        return None  # Chinese was weighed above, better; UTF-16/32 without a BOM would hold NUL bytes for ASCII
    try:
        return data.decode(codec), codec
    except (UnicodeDecodeError, LookupError):
        return None


def is_no_space_char(ch: str) -> bool:
    """CJK ideographs, kana, CJK punctuation, full-width forms: no space goes between these and a neighbour."""
    return bool(_NO_SPACE_CHAR.match(ch))


def join_lines(lines: list[str]) -> str:
    """Wrapped lines of one paragraph as one line: a space between words, none where either side is CJK."""
    parts: list[str] = []
    for line in lines:
        line = _SPACES.sub(" ", line).strip()
        if not line:
            continue
        if parts and _space_between(parts[-1], line):
            parts.append(" ")
        parts.append(line)
    return "".join(parts)


def _space_between(before: str, after: str) -> bool:
    if is_no_space_char(before[-1]) or is_no_space_char(after[0]):
        return False
    # A hyphen ending a wrapped line joins the halves of a compound without a space ("well-" + "known").
    return not (before[-1] == "-" and len(before) > 1 and before[-2].isalpha() and after[0].isalnum())


def parse(data: bytes, limits: ParseLimits) -> ParsedDocument:
    """Paragraphs split on blank lines; a short first line standing alone is the title."""
    text, encoding = decode_text(data)
    if len(text) > limits.max_chars:
        raise ParseError(ParseErrorCode.TOO_LARGE, f"text too large: {len(text)} characters (limit {limits.max_chars})")
    paragraphs = split_paragraphs(text)
    title = ""
    if len(paragraphs) > 1 and len(paragraphs[0]) == 1 and looks_like_title(paragraphs[0][0]):
        title = join_lines(paragraphs.pop(0))
    blocks = [Block(joined) for joined in map(join_lines, paragraphs) if joined]
    return ParsedDocument(Format.TEXT, title, blocks, encoding=encoding)


def split_paragraphs(text: str) -> list[list[str]]:
    """Lists of non-blank lines, cut at blank lines and form feeds; control characters dropped."""
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\f", "\n\n").replace("\v", "\n")
    text = _CONTROLS.sub("", text)
    paragraphs = []
    for chunk in _BLANK_LINE.split(text):
        lines = [line for line in chunk.split("\n") if line.strip()]
        if lines:
            paragraphs.append(lines)
    return paragraphs


def looks_like_title(line: str) -> bool:
    line = line.strip()
    return 0 < len(line) <= _MAX_TITLE and not line.endswith(_CONTINUES)
