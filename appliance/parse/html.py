"""HTML -> blocks: the page's main content, without navigation, cookie banners, sidebars and footers.

selectolax (lexbor) parses; nothing in the tree is removed (a freed lexbor node must never be touched again),
boilerplate subtrees are skipped while walking instead. The content root is `<main>`/`[role=main]`, or the
dominant `<article>` inside it; without either, the body with link-heavy blocks dropped.
"""
from __future__ import annotations

import codecs
import re
from collections.abc import Iterator

from selectolax.lexbor import LexborHTMLParser, LexborNode

from .document import Block, Format, ParsedDocument, ParseError, ParseErrorCode, ParseLimits, table_block
from .text import decode_text

_BOMS = (codecs.BOM_UTF8, codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)
_META_CHARSET = re.compile(rb"""<meta[^<>]*?charset\s*=\s*["']?\s*([A-Za-z0-9._:-]+)""", re.IGNORECASE)
# WHATWG: these labels mean their supersets; a meta that says UTF-16 on bytes without a BOM means UTF-8.
_SUPERSETS = {"gb2312": "gb18030", "gbk": "gb18030", "latin-1": "cp1252", "iso8859-1": "cp1252",
              "ascii": "cp1252", "utf-16": "utf-8", "utf-16-le": "utf-8", "utf-16-be": "utf-8"}
_NEVER_TEXT = {"script", "style", "noscript", "template", "svg", "iframe", "object", "embed", "canvas", "select",
               "textarea", "input", "button", "head", "title", "meta", "link"}
_LAYOUT = {"nav", "aside", "footer", "menu"}
_ROLES = {"navigation", "banner", "contentinfo", "complementary", "search", "dialog", "alertdialog", "menubar"}
_BOILER_WORDS = {"cookie", "cookies", "consent", "gdpr", "banner", "breadcrumb", "breadcrumbs", "sidebar",
                 "share", "sharing", "social", "advert", "advertisement", "ads", "ad", "sponsored", "promo",
                 "newsletter", "related", "popup", "modal", "navbar", "subscribe", "skiplink", "toolbar"}
_HIDDEN_STYLE = re.compile(r"display\s*:\s*none|visibility\s*:\s*hidden", re.IGNORECASE)
_HEADINGS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}
_BLOCKS = {"address", "article", "aside", "blockquote", "body", "caption", "center", "dd", "details", "dialog",
           "div", "dl", "dt", "fieldset", "figcaption", "figure", "footer", "form", "header", "hgroup", "hr",
           "li", "main", "nav", "ol", "p", "section", "summary", "table", "tbody", "td", "tfoot", "th", "thead",
           "tr", "ul", "pre", *_HEADINGS}
_CONTENT = {"main", "article", "section"}  # a <header> inside these is content, not the site's header
_MAX_LINK_DENSITY = 0.5
_MIN_ARTICLE_SHARE = 0.6  # of all top-level articles' text: a page of teasers has no dominant article
# lexbor takes time quadratic in the nesting depth of <div>s (200,000 levels: 3 minutes), so deeper is refused.
_MAX_DEPTH = 10_000
_H1, _HAS_LAYOUT, _NESTED_ARTICLE, _IS_ARTICLE = 1, 2, 4, 8
# Inside a table, these make it a layout table (walked like a page) rather than a data table (one block).
_LAYOUT_SIGNS = {"table", "ul", "ol", "dl", "blockquote", "pre", "form", "article", "section", "main", "nav",
                 *_HEADINGS}
_BR = object()  # a <br> in the inline buffer
# `[^<>]`: an unclosed `<a` ends its scan at the next `<`; with `[^>]`, 120 KB of `<a` took quadratic time.
_TAG = re.compile(r"<(/?)([A-Za-z][A-Za-z0-9:-]*+)[^<>]*?(/?)>")
# Void elements, and those whose end tag pages usually leave out: neither makes the tree deeper for long.
_NO_END_TAG = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track",
               "wbr", "param", "keygen", "p", "li", "dt", "dd", "tr", "td", "th", "option", "thead", "tbody",
               "tfoot", "html", "head", "body"}


def parse(data: bytes, limits: ParseLimits) -> ParsedDocument:
    text, encoding = decode_html(data)
    depth = _nesting_depth(text, _MAX_DEPTH)
    if depth > _MAX_DEPTH:
        raise ParseError(ParseErrorCode.TOO_LARGE, f"The HTML nests elements more than {_MAX_DEPTH:,} levels "
                                                   f"deep, the limit.")
    tree = LexborHTMLParser(text)
    body = tree.body
    if body is None:
        raise ParseError(ParseErrorCode.EMPTY, "The HTML page has no body.")
    index = _index(body)
    root, in_body = _content_root(tree, body, index)
    collector = _Collector(index, filter_links=in_body)
    collector.run(root)
    if not collector.blocks and root.mem_id != body.mem_id:  # an empty <main> shell: read the whole page
        collector = _Collector(index, filter_links=True)
        collector.run(body)
    blocks, title = collector.blocks, collector.title or _head_title(tree)
    if not blocks and collector.title:
        blocks = [Block(collector.title)]
    if not blocks:
        raise ParseError(ParseErrorCode.EMPTY, "The HTML page holds no text.")
    chars = sum(len(b.text) for b in blocks)
    if chars > limits.max_chars:
        raise ParseError(ParseErrorCode.TOO_LARGE, f"The page holds {chars:,} characters of text; "
                                                   f"the limit is {limits.max_chars:,}.")
    return ParsedDocument(Format.HTML, title, blocks, pages=None, encoding=encoding)


def decode_html(data: bytes) -> tuple[str, str]:
    """The page's text and encoding: a BOM, else a `<meta>` charset that decodes cleanly, else detection, else
    the `<meta>` charset with the bad bytes replaced (a page with a few broken bytes is still a page)."""
    if data.startswith(_BOMS):
        return decode_text(data)
    declared = ""
    match = _META_CHARSET.search(data[:4096])
    if match:
        try:
            declared = codecs.lookup(match.group(1).decode("ascii")).name
            declared = _SUPERSETS.get(declared, declared)
            return data.decode(declared), declared
        except LookupError:
            declared = ""
        except UnicodeDecodeError:
            pass  # bytes that contradict the label: detection decides
    try:
        return decode_text(data)
    except ParseError:
        if not declared:
            raise
        return data.decode(declared, errors="replace"), declared


def _nesting_depth(text: str, limit: int) -> int:
    """How deep the tags nest, roughly, stopping past `limit` (the real parser is what gets slow); 0 where the
    page has too few tags to get that deep."""
    if text.count("<") <= limit:  # too few tags to nest that deep: spare the scan
        return 0
    stack: list[str] = []
    position = 0
    while (match := _TAG.search(text, position)) is not None:
        position = match.end()
        closing, name, self_closing = match.group(1), match.group(2).lower(), match.group(3)
        if closing:  # pops back to its start tag; a stray end tag is not searched for far
            for i in range(len(stack) - 1, max(-1, len(stack) - 257), -1):
                if stack[i] == name:
                    del stack[i:]
                    break
        elif name in ("script", "style", "textarea", "title"):  # raw text up to its end tag
            end = text.find(f"</{name}", position)
            position = len(text) if end < 0 else end
        elif not self_closing and name not in _NO_END_TAG:
            stack.append(name)
            if len(stack) > limit:
                break
    return len(stack)


def _index(body: LexborNode) -> dict[int, tuple[int, int]]:
    """mem_id -> (characters of text below, flags): holds an h1, holds layout, sits inside an article."""
    index: dict[int, tuple[int, int]] = {}
    open_: list[list[int]] = []  # [chars, flags] of the elements being walked
    for kind, node in _walk(body, lambda n: "skip" if n.tag in _NEVER_TEXT else "walk"):
        if kind == "text":
            if open_:
                open_[-1][0] += len((node.text_content or "").strip())
        elif kind == "enter":
            inside = open_ and (open_[-1][1] & _NESTED_ARTICLE or open_[-1][1] & _IS_ARTICLE)
            open_.append([0, (_NESTED_ARTICLE if inside else 0) | (_IS_ARTICLE if node.tag == "article" else 0)])
        else:
            chars, flags = open_.pop()
            tag = node.tag
            flags |= (_H1 if tag == "h1" else 0)
            index[node.mem_id] = (chars, flags)
            if open_:
                open_[-1][0] += chars
                open_[-1][1] |= (flags & (_H1 | _HAS_LAYOUT)) | (_HAS_LAYOUT if tag in _LAYOUT_SIGNS else 0)
    return index


def _walk(root: LexborNode, classify) -> Iterator[tuple[str, LexborNode]]:
    """Depth-first ("enter" | "exit" | "text" | "unit", node); `classify(element)` says "walk", "skip" or "unit"."""
    stack: list[tuple[LexborNode, bool]] = [(root, False)]
    while stack:
        node, leaving = stack.pop()
        if leaving:
            yield "exit", node
        elif node.is_text_node:
            yield "text", node
        elif node.is_element_node:
            mode = classify(node)
            if mode == "unit":
                yield "unit", node
            elif mode == "walk":
                yield "enter", node
                stack.append((node, True))
                stack.extend((child, False) for child in reversed(list(node.iter(include_text=True))))


def _content_root(tree: LexborHTMLParser, body: LexborNode, index: dict) -> tuple[LexborNode, bool]:
    """The main content and whether it is the whole body (then link-heavy blocks are dropped)."""
    main = tree.css_first("main") or tree.css_first("[role=main]")
    container = main if main is not None and index.get(main.mem_id, (0, 0))[0] > 0 else body
    articles = [a for a in container.css("article")
                if a.mem_id in index and not index[a.mem_id][1] & _NESTED_ARTICLE and not _hidden(a)]
    sizes = [index[a.mem_id][0] for a in articles]
    if sizes and max(sizes) > 0 and max(sizes) >= _MIN_ARTICLE_SHARE * sum(sizes):
        return articles[sizes.index(max(sizes))], False
    return container, container.mem_id == body.mem_id


def _head_title(tree: LexborHTMLParser) -> str:
    meta = tree.css_first('meta[property="og:title"]') or tree.css_first('meta[name="og:title"]')
    if meta is not None and _collapse(meta.attributes.get("content") or ""):
        return _collapse(meta.attributes.get("content") or "")
    title = tree.head.css_first("title") if tree.head is not None else None
    return _collapse(title.text(deep=True)) if title is not None else ""


def _hidden(node: LexborNode) -> bool:
    attrs = node.attributes
    # hidden="until-found" is collapsed content that find-in-page opens: the page's text all the same.
    if "hidden" in attrs and (attrs["hidden"] or "").strip().lower() != "until-found":
        return True
    return ((attrs.get("aria-hidden") or "").strip().lower() == "true"
            or bool(_HIDDEN_STYLE.search(attrs.get("style") or "")))


def _is_boilerplate(node: LexborNode, index: dict, page_chars: int, in_content: bool) -> bool:
    """Hidden, navigation, site header/footer, sidebars, dialogs, cookie banners and the like."""
    tag, attrs = node.tag, node.attributes
    if tag in ("html", "body", "main", "article") or attrs.get("role") == "main":
        return False
    if _hidden(node) or (tag == "dialog" and "open" not in attrs):
        return True
    if tag in _LAYOUT or (tag == "header" and not in_content):  # a header in an article is the article's
        return True
    if (attrs.get("role") or "").strip().lower() in _ROLES:
        return True
    # Forms, class and id names are a guess: spare what holds the page's heading or most of its text
    # (ASP.NET pages wrap everything in one <form>).
    chars, flags = index.get(node.mem_id, (0, 0))
    if flags & _H1 or chars > page_chars / 2:
        return False
    return tag == "form" or _boiler_name(attrs.get("class") or "") or _boiler_name(attrs.get("id") or "")


def _boiler_name(value: str) -> bool:
    words = set(re.findall(r"[a-z0-9]+", re.sub(r"([a-z])([A-Z])", r"\1 \2", value).lower()))
    return bool(words & _BOILER_WORDS)


def _inline_text(node: LexborNode) -> str:
    """The visible text of a heading or cell on one line: <br> and block boundaries are spaces."""
    parts = []
    for kind, child in _walk(node, lambda n: "skip" if n.tag in _NEVER_TEXT or _hidden(n) else "walk"):
        if kind == "text":
            parts.append(child.text_content or "")
        elif child.tag == "br" or child.tag in _BLOCKS:
            parts.append(" ")
    return _collapse("".join(parts))


def _collapse(text: str) -> str:
    # A source line break is a space, between Chinese characters too: pandoc and others wrap lines at spaces.
    return " ".join(text.split())


class _Collector:
    """Walks the content root and turns it into blocks under the heading path; the first h1 is the title."""

    def __init__(self, index: dict, filter_links: bool):
        self.index, self.filter_links = index, filter_links
        self.blocks: list[Block] = []
        self.title = ""
        self.path: list[tuple[int, str]] = []
        self.parts: list = []  # inline text: (text, inside a link) or _BR
        self.links = 0  # depth of <a> elements around the current text
        self.content_depth = 0  # depth of main/article/section elements around the walk
        self.page_chars = 0

    def run(self, root: LexborNode) -> None:
        self.page_chars = self.index.get(root.mem_id, (0, 0))[0]
        self.content_depth = 1 if root.tag in _CONTENT else 0
        for kind, node in _walk(root, self._classify):
            if kind == "text":
                self.parts.append((node.text_content or "", self.links > 0))
            elif kind == "unit":
                self._unit(node)
            else:
                self._edge(node, entering=kind == "enter")
        self._flush()

    def _classify(self, node: LexborNode) -> str:
        tag = node.tag
        if tag in _NEVER_TEXT or _is_boilerplate(node, self.index, self.page_chars, self.content_depth > 0):
            return "skip"
        if tag in _HEADINGS or tag == "pre" or (tag == "table" and not self.index.get(node.mem_id, (0, 0))[1]
                                                & _HAS_LAYOUT):
            return "unit"
        return "walk"

    def _edge(self, node: LexborNode, entering: bool) -> None:
        tag, step = node.tag, 1 if entering else -1
        if tag == "a":
            self.links += step
        elif tag == "br" and entering:
            self.parts.append(_BR)
        elif tag in _BLOCKS:
            self._flush()
        if tag in _CONTENT:
            self.content_depth += step

    def _unit(self, node: LexborNode) -> None:
        self._flush()
        tag = node.tag
        if tag in _HEADINGS:
            self._heading(_HEADINGS[tag], _inline_text(node))
        elif tag == "pre":
            text = node.text(deep=True).strip("\n")
            if text.strip():
                self._add(text)
        else:
            self._table(node)

    def _heading(self, level: int, text: str) -> None:
        if not text:
            return
        if level == 1 and not self.title:  # the page's own heading: its title, not a section
            self.title = text
            return
        while self.path and self.path[-1][0] >= level:
            self.path.pop()
        self.path.append((level, text))

    def _table(self, table: LexborNode) -> None:
        """A data table's rows; the leading rows in <thead> or of <th> cells only head it, else its first row."""
        rows, heading, link_chars = [], 0, 0
        caption = table.css_first("caption")
        for row in table.css("tr"):
            cells = [cell for cell in row.iter() if cell.tag in ("td", "th")]
            rows.append([_inline_text(cell) for cell in cells])
            if len(rows) - 1 == heading and cells and (row.parent.tag == "thead" or
                                                         all(cell.tag == "th" for cell in cells)):
                heading += 1
            link_chars += sum(len(_collapse(a.text(deep=True))) for a in row.css("a"))
        block = table_block(rows, heading or 1, None, tuple(t for _, t in self.path),
                            _inline_text(caption) if caption is not None else "")
        if block is not None and not (self.filter_links and link_chars > _MAX_LINK_DENSITY * len(block.text)):
            self.blocks.append(block)

    def _flush(self) -> None:
        parts, self.parts = self.parts, []
        lines, current, link_chars = [], [], 0
        for part in parts + [_BR]:
            if part is _BR:
                lines.append(_collapse("".join(current)))
                current = []
            else:
                current.append(part[0])
                link_chars += len(_collapse(part[0])) if part[1] else 0
        text = "\n".join(line for line in lines if line)
        if not text or (self.filter_links and link_chars > _MAX_LINK_DENSITY * len(text)):
            return
        self._add(text)

    def _add(self, text: str) -> None:
        self.blocks.append(Block(text, None, tuple(t for _, t in self.path)))
