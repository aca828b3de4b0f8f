"""The streaming multipart reader: what clients send reads the same however the body is cut into chunks; what no
client sends is refused; the cost stays linear for data that made python-multipart work byte by byte."""
from __future__ import annotations

import random
import time

import httpx
import pytest

from appliance.serve.uploads.multipart import (MultipartError, MultipartReader, PartData, PartEnd, PartStart, boundary_of,
                                       parse_header_params)


def _read(body: bytes, boundary: bytes, cuts: list[int], max_parts: int = 10) -> list[tuple[PartStart, bytes]]:
    reader, parts, current = MultipartReader(boundary, max_parts), [], None
    for start, end in zip([0, *cuts], [*cuts, len(body)]):
        for event in reader.feed(body[start:end]):
            if isinstance(event, PartStart):
                current = [event, b""]
            elif isinstance(event, PartData):
                current[1] += event.data
            else:
                assert isinstance(event, PartEnd)
                parts.append(tuple(current))
    reader.close()
    return parts


def _httpx_body() -> tuple[bytes, bytes]:
    """A body as httpx (the client library most of our users' scripts use) builds it."""
    request = httpx.Request("POST", "http://x/v1/files", data={"partition": "docs", "metadata": '{"a": "\u00e9"}'},
                            files=[("file", ("r\u00e9sum\u00e9 1.txt", b"line\r\n--not a delimiter\r\n" * 50)),
                                   ("file", ("empty.bin", b""))])
    return request.read(), boundary_of(request.headers["content-type"])


@pytest.mark.parametrize("seed", range(6))
def test_a_clients_body_reads_the_same_however_it_is_cut(seed):
    body, boundary = _httpx_body()
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(body)), 40)) if seed else list(range(1, len(body)))  # seed 0: byte by byte
    parts = _read(body, boundary, cuts)
    assert [(p.name, p.filename) for p, _ in parts] == [("partition", None), ("metadata", None),
                                                        ("file", "r\u00e9sum\u00e9 1.txt"), ("file", "empty.bin")]
    assert [data for _, data in parts] == [b"docs", '{"a": "\u00e9"}'.encode(),
                                           b"line\r\n--not a delimiter\r\n" * 50, b""]


def test_header_parameters_as_browsers_curl_and_rfc_5987_write_them():
    assert parse_header_params('form-data; name="file"; filename="C:\\dir\\a.txt"') == (
        "form-data", {"name": "file", "filename": "C:\\dir\\a.txt"})  # a browser sends a backslash as it is
    assert parse_header_params('form-data; name=file; filename="say \\"hi\\".txt"')[1]["filename"] == 'say "hi".txt'
    assert parse_header_params("form-data; name=\"f\"; filename*=UTF-8''%E4%B8%AD.txt")[1]["filename*"] == "\u4e2d.txt"
    assert parse_header_params('form-data; flag; name="file"') == ("form-data", {"name": "file"})
    assert parse_header_params('Multipart/Form-Data; Boundary="a b"') == ("multipart/form-data", {"boundary": "a b"})
    with pytest.raises(MultipartError):
        parse_header_params('form-data; name="never closed')
    with pytest.raises(MultipartError):
        parse_header_params("form-data; filename*=nope''%FF")


@pytest.mark.parametrize("content_type", ["multipart/form-data", "multipart/form-data; boundary=",
                                          "multipart/form-data; boundary=" + "x" * 71, "text/plain; boundary=x",
                                          "multipart/form-data; boundary=\"\u00e9\""])
def test_a_content_type_without_a_usable_boundary_is_refused(content_type):
    with pytest.raises(MultipartError):
        boundary_of(content_type)


@pytest.mark.parametrize("body, problem", [
    (b"--B\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nnever closed", "ended before"),
    (b"--B\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nx\r\n--B!junk", "other bytes than CRLF"),
    (b"--B\r\n\r\nno headers\r\n--B--", "no Content-Disposition"),
    (b"--B\r\nContent-Type: text/plain\r\n\r\nx\r\n--B--", "no Content-Disposition"),
    (b"--B\r\nContent-Disposition: attachment; name=\"a\"\r\n\r\nx\r\n--B--", "form-data with a name"),
    (b"--B\r\nX: " + b"y" * 20_000 + b"\r\n\r\n", "longer than"),
    (b"z" * 70_000 + b"\r\n--B", "first 65536 bytes"),
    (b"--B\r\nContent-Disposition: form-data; name=\"a\"\r\n\xff: x\r\n\r\n", "not UTF-8"),
    (b"".join(b"--B\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nx\r\n" for _ in range(4)) + b"--B--",
     "more than 3 parts"),
])
def test_what_no_client_sends_is_refused_with_its_reason(body, problem):
    with pytest.raises(MultipartError, match=problem):
        _read(body, b"B", list(range(7, len(body), 7)), max_parts=3)


def test_the_epilogue_and_transport_padding_are_allowed():
    body = b"preamble\r\n--B  \r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nx\r\n--B--\r\nepilogue"
    assert [data for _, data in _read(body, b"B", [11, 12, 30])] == [b"x"]


def _cost(data: bytes, boundary: bytes) -> float:
    reader = MultipartReader(boundary, 10)
    reader.feed(b"--" + boundary + b'\r\nContent-Disposition: form-data; name="file"; filename="a"\r\n\r\n')
    started = time.perf_counter()
    for start in range(0, len(data), 65536):
        reader.feed(data[start:start + 65536])
    return time.perf_counter() - started


@pytest.mark.parametrize("pattern", [b"\r\n--" + b"x" * 39 + b"!", b"\r\n--", b"\r\n-", b"\r", b"-"])
def test_data_that_almost_repeats_the_delimiter_costs_what_plain_data_costs(pattern):
    """python-multipart spends ~9-25 ms per 64 KiB on such data (on the event loop); here it is one `find` per
    chunk. Compared with plain bytes of the same size, best of three runs."""
    boundary = b"x" * 40
    size = 8 * 1024 * 1024
    hostile = (pattern * (size // len(pattern) + 1))[:size]
    plain = b"z" * size
    ratio = min(_cost(hostile, boundary) for _ in range(3)) / min(_cost(plain, boundary) for _ in range(3))
    assert ratio < 10, ratio
