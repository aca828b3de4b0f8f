"""The parsing stage: a file's bytes -> a `ParsedDocument` (text blocks with page and heading path).

Formats are told from the content (magic bytes, then the text itself), never from the file name. `parse_bytes`
runs in the calling process; `ParserPool` runs it in worker processes bounded in time and memory, so a hostile
file cannot hang or crash the server.
"""
from .detect import detect_format
from .document import (MEDIA_TYPES, PARSER_VERSION, Block, Format, ParsedDocument, ParseError, ParseErrorCode,
                       ParseLimits)
from .dispatch import parse_bytes
from .pool import ParserPool, PoolStats

__all__ = ["Block", "Format", "MEDIA_TYPES", "PARSER_VERSION", "ParsedDocument", "ParseError", "ParseErrorCode",
           "ParseLimits", "ParserPool", "PoolStats", "detect_format", "parse_bytes"]
