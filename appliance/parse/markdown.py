"""Markdown -> blocks: markdown-it-py (CommonMark + tables) finds the structure, the text stays what a reader reads.

Markdown files are often plain text that was never meant as Markdown (abstracts with `a*b*c`, `p<0.05`,
`[CI]`), so syntax is removed only where it is clearly syntax: emphasis markers inside a word stay, raw HTML
is dropped only when it is a known HTML tag (`<CD4>` stays), and an ordered list keeps its numbers.
"""
from __future__ import annotations

import re
from html import unescape

from markdown_it import MarkdownIt
from markdown_it.token import Token

from .document import Block, Format, ParsedDocument, ParseError, ParseErrorCode, ParseLimits, table_block
from .text import decode_text, is_no_space_char

_FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n(.*?)^(?:---|\.\.\.)[ \t]*(?:\r?\n|\Z)", re.DOTALL | re.MULTILINE)
_FRONT_TITLE = re.compile(r"^title[ \t]*+:(.*)$", re.MULTILINE)  # stripped after: `(.*?)[ \t]*$` was quadratic
_MAX_FRONT_MATTER = 64 * 1024
# Possessive `\s*+`: `<` and 64 KiB of blanks no longer tries every split of the blanks between the two `\s*`.
_HTML_TAG = re.compile(r"<\s*+/?\s*+([A-Za-z][A-Za-z0-9-]*)")
_HTML_NOT_TEXT = re.compile(r"<(script|style)\b|<!--", re.IGNORECASE)  # its end is found by _not_text_end
_NOT_TEXT_END = {"script": re.compile(r"</script\s*>", re.I), "style": re.compile(r"</style\s*>", re.I)}
_ANY_TAG = re.compile(r"<[^<>]*>")  # `[^<>]`: a `<` never closed ends its scan at the next `<`, not the text's end
_KNOWN_TAGS = frozenset(
    "a abbr address article aside b bdi bdo big blockquote br button caption center cite code col colgroup data dd "
    "del details dfn div dl dt em figcaption figure font footer form h1 h2 h3 h4 h5 h6 header hr i iframe img "
    "input ins kbd label li main mark nav ol p picture pre q s samp section small source span strike strong sub "
    "summary sup table tbody td tfoot th thead time tr tt u ul var video wbr".split())
_HARD_BREAK = "\x00"  # stands for a hard line break until the lines are joined (NULs are dropped from input)
_BREAK_TAGS = {"br", "p", "div", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "blockquote", "pre", "table"}


def parse(data: bytes, limits: ParseLimits) -> ParsedDocument:
    text, encoding = decode_text(data)
    if len(text) > limits.max_chars:
        raise ParseError(ParseErrorCode.TOO_LARGE, f"The Markdown file holds {len(text):,} characters; "
                                                   f"the limit is {limits.max_chars:,}.")
    text, front_title = split_front_matter(text.replace(_HARD_BREAK, ""))
    tokens = MarkdownIt("commonmark").enable("table").parse(text)
    title, blocks = _Builder(front_title).build(tokens)
    if not blocks:
        raise ParseError(ParseErrorCode.EMPTY, "The Markdown file holds no text.")
    return ParsedDocument(Format.MARKDOWN, title, blocks, pages=None, encoding=encoding)


def split_front_matter(text: str) -> tuple[str, str]:
    """The text without a YAML front matter block at its very top, and that block's `title:`, if any."""
    match = _FRONT_MATTER.match(text[:_MAX_FRONT_MATTER])
    if match is None:
        return text, ""
    title = _FRONT_TITLE.search(match.group(1))
    value = title.group(1).strip(" \t") if title else ""
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        value = value[1:-1]
    if value[:1] in ("|", ">", "[", "{"):  # a block scalar or a structure: not a plain title
        value = ""
    return text[match.end():], " ".join(value.split())


class _Builder:
    """Walks the block tokens: headings build the path, each paragraph, code block and table is a block."""

    def __init__(self, front_title: str):
        self.title = front_title
        self.path: list[tuple[int, str]] = []
        self.blocks: list[Block] = []
        self.seen_heading = False
        self.item_numbers: list[str] = []  # "3." for the ordered list item being read, "" for a bullet

    def build(self, tokens: list[Token]) -> tuple[str, list[Block]]:
        i = 0
        while i < len(tokens):
            i = self._token(tokens, i)
        return self.title, self.blocks

    def _token(self, tokens: list[Token], i: int) -> int:
        """Handles tokens[i] (and what belongs to it); the index of the next token to handle."""
        token = tokens[i]
        kind = token.type
        if kind == "heading_open":
            self._heading(int(token.tag[1]), inline_text(tokens[i + 1]))
            return i + 3
        if kind == "paragraph_open":
            text = inline_text(tokens[i + 1])
            number = self.item_numbers[-1] if self.item_numbers else ""
            if number:  # only the item's first paragraph carries its number
                self.item_numbers[-1] = ""
                text = f"{number} {text}" if text else number
            self._add(text)
            return i + 3
        if kind == "list_item_open":
            ordered = token.markup in (".", ")")
            self.item_numbers.append(f"{token.info}{token.markup}" if ordered and token.info else "")
        elif kind == "list_item_close":
            self.item_numbers.pop()
        elif kind in ("fence", "code_block"):
            self._add(token.content.strip("\n"))
        elif kind == "html_block":
            self._add(html_text(token.content))
        elif kind == "table_open":
            return self._table(tokens, i)
        return i + 1

    def _heading(self, level: int, text: str) -> None:
        first, self.seen_heading = not self.seen_heading, True
        if not text:
            return
        # The document's own heading is its title, not a section (also when front matter states the same title).
        if level == 1 and first and (not self.title or text.casefold() == self.title.casefold()):
            self.title = self.title or text
            return
        while self.path and self.path[-1][0] >= level:
            self.path.pop()
        self.path.append((level, text))

    def _table(self, tokens: list[Token], i: int) -> int:
        """Its rows; a Markdown table always has its header row."""
        rows, cells = [], []
        while i < len(tokens) and tokens[i].type != "table_close":
            token = tokens[i]
            if token.type == "inline":
                cells.append(inline_text(token))
            elif token.type == "tr_close":
                rows.append(cells)
                cells = []
            i += 1
        if (block := table_block(rows, 1, None, tuple(t for _, t in self.path))) is not None:
            self.blocks.append(block)
        return i + 1

    def _add(self, text: str) -> None:
        if text.strip():
            self.blocks.append(Block(text, None, tuple(t for _, t in self.path)))


def inline_text(token: Token) -> str:
    """What a reader sees of an inline run: the text, with emphasis markers only where they sit inside a word."""
    out: list[str] = []
    opened: list[int] = []  # indexes in `out` of emphasis openers waiting for their closer
    children = token.children or []
    for n, child in enumerate(children):
        kind = child.type
        if kind in ("text", "code_inline", "image"):  # an image's content is its alt text
            out.append(child.content)
        elif kind == "softbreak":
            out.append("\n")
        elif kind == "hardbreak":
            out.append(_HARD_BREAK)
        elif kind == "html_inline":
            out.append(_inline_html(child.content))
        elif kind in ("em_open", "strong_open"):
            opened.append(len(out))
            out.append(child.markup)
        elif kind in ("em_close", "strong_close") and opened:
            start = opened.pop()
            before = next((out[j] for j in range(start - 1, -1, -1) if out[j]), "")[-1:]
            if before.isalnum() or _first_char(children[n + 1:]).isalnum():  # a*b*c is text, *word* emphasis
                out.append(child.markup)
            else:
                out[start] = ""
    return "\n".join(_join_lines(line) for line in "".join(out).split(_HARD_BREAK) if line.strip())


def html_text(source: str) -> str:
    """The text of a raw HTML block: tags gone, entities decoded, breaks where the tags break lines."""
    source = _without_not_text(source)
    text = _HTML_TAG.sub(lambda m: "\n<" if m.group(1).lower() in _BREAK_TAGS else "<", source)
    text = _ANY_TAG.sub("", text)
    return "\n".join(line for line in (" ".join(part.split()) for part in unescape(text).split("\n")) if line)


def _without_not_text(source: str) -> str:
    """`source` without scripts, styles and comments. One left open runs to the end (as in a browser), so each
    start is followed by one search for its end: linear, where `<script\b.*?</script>` rescanned the rest of the
    text from every unclosed `<script`."""
    kept, position = [], 0
    while (start := _HTML_NOT_TEXT.search(source, position)) is not None:
        kept.append(source[position:start.start()])
        name = (start.group(1) or "").lower()
        if name:
            end = _NOT_TEXT_END[name].search(source, start.end())
            position = end.end() if end else len(source)
        else:
            end_at = source.find("-->", start.end())
            position = end_at + 3 if end_at >= 0 else len(source)
    kept.append(source[position:])
    return "".join(kept)


def _inline_html(source: str) -> str:
    # Known HTML tags are markup; anything else that looked like a tag (<CD4>, <i.v.>) is the author's text.
    match = _HTML_TAG.match(source)
    if source.startswith("<!--") or (match and match.group(1).lower() in _KNOWN_TAGS):
        return _HARD_BREAK if match and match.group(1).lower() == "br" else ""
    return source


def _first_char(children: list[Token]) -> str:
    for child in children:
        if child.type in ("text", "code_inline") and child.content:
            return child.content[0]
        if child.type in ("softbreak", "hardbreak"):
            return " "
    return ""


def _join_lines(text: str) -> str:
    """Soft line breaks as spaces, none between CJK characters (as the plain text parser does); spaces collapsed."""
    lines = [" ".join(line.split()) for line in text.split("\n")]
    out = ""
    for line in lines:
        if not line:
            continue
        if out and not (is_no_space_char(out[-1]) or is_no_space_char(line[0])):
            out += " "
        out += line
    return out
