"""Opening Office files (zip archives) safely: zip bombs, absurd part counts and non-zip Office files are refused.

The figures checked are what the central directory declares, and what is then read is held to them. `zipfile`
never returns more than a member's declared size (`ZipExtFile` cuts the stream there and checks the CRC), but a
whole-member `read()`, which python-docx and python-pptx use, first inflates up to 1 GiB of the stream and only
then cuts it (`ZipExtFile.MAX_N`): a header that understates a member would still cost that memory. So the
parsers get `safe_package()`: every member read in bounded steps, then packed again uncompressed (tested).
"""
from __future__ import annotations

import io
import struct
import zipfile
import zlib

from .document import ParseError, ParseErrorCode, ParseLimits

OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_STEP = 1024 * 1024  # bytes inflated per read: the most a lying member can cost beyond its declared size
# Below this a member's compression ratio is not checked: small XML parts routinely compress 50-500x.
RATIO_FLOOR_BYTES = 1024 * 1024
_EOCD = b"PK\x05\x06"
_EOCD_SEARCH = 22 + 65535  # the end record plus the longest archive comment
# Core-property titles that programs write by themselves, not the author.
_PLACEHOLDER_TITLES = {"", "untitled", "title", "document", "presentation", "powerpoint presentation",
                       "slide 1", "word document", "microsoft word document"}


def open_archive(data: bytes, limits: ParseLimits) -> zipfile.ZipFile:
    """The archive in `data`, once its declared part count, sizes and compression ratios are within `limits`."""
    if data.startswith(OLE_MAGIC):
        raise ole_error(data)
    _check_declared_count(data, limits)
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, OSError, EOFError) as e:
        raise ParseError(ParseErrorCode.CORRUPT, f"The file is not a readable Office document (bad zip: {e}).")
    try:
        check_archive(archive, limits)
    except ParseError:
        archive.close()
        raise
    return archive


def check_archive(archive: zipfile.ZipFile, limits: ParseLimits) -> None:
    """Refuses an archive whose central directory declares more than `limits` allow."""
    infos = archive.infolist()
    if len(infos) > limits.max_parts:
        raise _too_large(f"The archive holds {len(infos):,} parts; the limit is {limits.max_parts:,}.")
    for info in infos:
        if info.file_size > limits.max_unpacked_bytes:
            raise _too_large(f"The part {info.filename!r} unpacks to {info.file_size:,} bytes; "
                             f"the limit is {limits.max_unpacked_bytes:,}.")
        ratio = _ratio(info.file_size, info.compress_size)
        if info.file_size > RATIO_FLOOR_BYTES and ratio > limits.max_ratio:
            raise _too_large(f"The part {info.filename!r} unpacks to {ratio:,.0f} times its packed size "
                             f"({info.file_size:,} bytes); the limit is {limits.max_ratio}x.")
    total = sum(info.file_size for info in infos)
    if total > limits.max_unpacked_bytes:
        raise _too_large(f"The archive unpacks to {total:,} bytes; the limit is {limits.max_unpacked_bytes:,}.")
    ratio = _ratio(total, sum(info.compress_size for info in infos))
    if total > RATIO_FLOOR_BYTES and ratio > limits.max_ratio:
        raise _too_large(f"The archive unpacks to {ratio:,.0f} times its packed size ({total:,} bytes); "
                         f"the limit is {limits.max_ratio}x.")


def safe_package(data: bytes, limits: ParseLimits) -> io.BytesIO:
    """The Office file packed again without compression, from members read no further than their declared size."""
    out = io.BytesIO()
    with open_archive(data, limits) as archive, zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as clean:
        last = {info.filename: info for info in archive.infolist()}  # a repeated name: zipfile reads the last
        for info in last.values():
            if not info.is_dir():
                clean.writestr(info.filename, _read_member(archive, info))
    out.seek(0)
    return out


def _read_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> bytes:
    chunks = []
    try:
        with archive.open(info) as member:
            while chunk := member.read(_STEP):
                chunks.append(chunk)
    except RuntimeError as e:  # zipfile's "File is encrypted": a zip-level password, not Office encryption
        raise ParseError(ParseErrorCode.ENCRYPTED, f"The part {info.filename!r} is password-protected ({e}).")
    except (zipfile.BadZipFile, zlib.error, NotImplementedError, EOFError, OSError, ValueError) as e:
        raise ParseError(ParseErrorCode.CORRUPT, f"The part {info.filename!r} cannot be unpacked: {e}")
    return b"".join(chunks)


def meaningful_title(title: str | None) -> str:
    """An Office core-properties title with whitespace collapsed, or "" where it is empty or a program default."""
    text = " ".join((title or "").split())
    lowered = text.lower()
    if lowered in _PLACEHOLDER_TITLES or lowered.startswith(("microsoft word - ", "microsoft powerpoint - ")):
        return ""
    return text


def _check_declared_count(data: bytes, limits: ParseLimits) -> None:
    # The end record states the entry count; refusing on it spares building 10^5 ZipInfo objects first.
    # zipfile itself walks the central directory by size, so a lying count is caught again after opening.
    at = data.rfind(_EOCD, max(0, len(data) - _EOCD_SEARCH))
    if at < 0 or at + 22 > len(data):
        return
    count = struct.unpack_from("<H", data, at + 10)[0]
    if count != 0xFFFF and count > limits.max_parts:  # 0xFFFF: the real count is in the zip64 record
        raise _too_large(f"The archive holds {count:,} parts; the limit is {limits.max_parts:,}.")


def ole_error(data: bytes) -> ParseError:
    # Password-protected .docx/.pptx are OLE compound files with an "EncryptedPackage" stream inside.
    if "EncryptedPackage".encode("utf-16-le") in data:
        return ParseError(ParseErrorCode.ENCRYPTED, "The Office document is password-protected; "
                                                    "remove the password and upload it again.")
    return ParseError(ParseErrorCode.UNSUPPORTED, "This is a legacy binary Office file (.doc/.ppt/.xls); "
                                                  "save it as .docx or .pptx and upload it again.")


def _ratio(unpacked: int, packed: int) -> float:
    return unpacked / max(packed, 1)


def _too_large(message: str) -> ParseError:
    return ParseError(ParseErrorCode.TOO_LARGE, message)
