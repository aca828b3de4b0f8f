"""Files over HTTP on a real server (real parsers in worker processes, real SQLite, real indexes): every format in
one request with bad files among them, each answered on its own; pages and sections in search results; the
original bytes back; hostile requests refused with a clear JSON error and nothing else changed."""
from __future__ import annotations

import asyncio
import hashlib
import io
import json
import time

import httpx
import pypdfium2 as pdfium
import pytest

from hostile_files import (CMRC_FILES, SCIFACT_FILES, encrypted_pdf, many_parts_docx, png, scan_of, scanned_pdf,
                           truncated, zip_bomb_docx)
from support import DATA, LiveServer, make_settings, write_keys
from test_parse_tables import HEADER, ROWS, catalogue_docx

MANIFEST = dict(line.split("\t")[1:] for line in (DATA / "scifact_files" / "manifest.tsv").read_text().splitlines()[1:])


def _producer(name: str) -> str:
    return MANIFEST[f"files/{name}"].strip()


def _first(ext: str, producer: str | None = None, folder=SCIFACT_FILES):
    return next(p for p in sorted(folder.glob(f"*.{ext}"))
                if producer is None or _producer(p.name) == producer)


GOOD = [_first("pdf", "libreoffice-pdf"), _first("pdf", "chromium-pdf"), _first("docx"), _first("html"),
        _first("md"), _first("txt"), _first("pdf", folder=CMRC_FILES), _first("txt", folder=CMRC_FILES),
        _first("docx", folder=CMRC_FILES)]


@pytest.fixture(scope="module")
def live(tmp_path_factory, models_dir):
    data_dir = tmp_path_factory.mktemp("files")
    keys_file, keys = write_keys(data_dir, ["acme", "other"])
    settings = make_settings(data_dir, models_dir, admission_keys_file=str(keys_file), parse_max_file_bytes="2000000",
                             parse_max_files_per_request="20", parse_max_upload_bytes="8000000")
    with LiveServer(settings, api_key=keys["acme"]) as server:
        server.keys = keys
        yield server


def _upload(client: httpx.Client, files: list[tuple[str, bytes]], **fields: str) -> httpx.Response:
    return client.post("/v1/files", data={"partition": "docs", **fields},
                       files=[("file", (name, data, "application/octet-stream")) for name, data in files])


def _listing(client: httpx.Client, partition: str = "docs") -> dict[str, dict]:
    reply = client.get("/v1/documents", params={"partition": partition})
    return {d["id"]: d for d in reply.json()["documents"]} if reply.status_code == 200 else {}


def test_every_format_in_one_request_bad_files_refused_one_by_one(live, tmp_path):
    pdf = GOOD[0].read_bytes()
    docx = GOOD[2].read_bytes()
    bad = {"scan.pdf": scanned_pdf(), "locked.pdf": encrypted_pdf(pdf), "bomb.docx": zip_bomb_docx(1024),
           "parts.docx": many_parts_docx(), "cut.docx": truncated(docx), "photo.png": png(),
           "huge.txt": b"big " * 600_000}
    with live.client() as c:
        kept = c.post("/v1/documents", json={"partition": "docs", "documents": [
            {"id": "note", "text": "The boiler restarts itself after a power cut."}]})
        assert kept.status_code == 200
        reply = _upload(c, [(p.name, p.read_bytes()) for p in GOOD] + list(bad.items()),
                        metadata=json.dumps({"team": "lab"}))
        listing = _listing(c)
    assert reply.status_code == 200, reply.text
    by_name = {f["file"]: f for f in reply.json()["files"]}
    for path in GOOD:
        assert by_name[path.name]["status"] == "created", by_name[path.name]
        assert by_name[path.name]["chunks"] >= 1
    errors = {name: by_name[name]["error"]["code"] for name in bad}
    assert errors == {"scan.pdf": "no_text_layer", "locked.pdf": "encrypted", "bomb.docx": "too_large",
                      "parts.docx": "too_large", "cut.docx": "corrupt_file", "photo.png": "no_text_layer",
                      "huge.txt": "too_large"}
    assert "OCR" in by_name["scan.pdf"]["error"]["message"]
    assert by_name[GOOD[0].name]["format"] == "pdf" and by_name[GOOD[0].name]["pages"] >= 1
    # nothing of a bad file was stored, and what was there before is still there
    assert set(listing) == {"note"} | {p.name for p in GOOD}
    assert listing["note"]["file"] is None
    assert listing[GOOD[2].name]["file"]["format"] == "docx" and listing[GOOD[2].name]["metadata"] == {"team": "lab"}


def test_a_scanned_pdf_and_a_photographed_page_are_read_by_ocr_and_cited_by_page(live):
    """Image-only uploads (a scan of a real SciFact PDF, a PNG of a CMRC page): stored with the pages whose text came
    from OCR, found by a question on that text, cited with their page (a later page: the console's test)."""
    pdf = SCIFACT_FILES / "10029970.pdf"
    photo = io.BytesIO()
    pdfium.PdfDocument((CMRC_FILES / "DEV_1.pdf").read_bytes())[0].render(scale=2).to_pil().save(photo, "PNG")
    scan_bytes = scan_of(pdf.read_bytes())
    with live.client() as c:
        reply = _upload(c, [("cdd-scan.pdf", scan_bytes)], partition="scans")
        again = _upload(c, [("cdd-scan.pdf", scan_bytes), ("notes.md", b"# Notes\n\nTyped, not scanned.\n")],
                        partition="scans")
        listed = {d["id"]: d["file"] for d in c.get("/v1/documents", params={"partition": "scans"}).json()[
            "documents"]}
        photographed = _upload(c, [("gong.png", photo.getvalue())], partition="scans-zh")
        english = c.post("/v1/search", json={"query": "Conserved Domain Database protein annotation",
                                             "partitions": ["scans"], "k": 1}).json()["results"]
        chinese = c.post("/v1/search", json={"query": "锣鼓经是什么记谱方法", "partitions": ["scans-zh"],
                                             "k": 1}).json()["results"]
        original = c.get("/v1/documents/gong.png/file", params={"partition": "scans-zh"})
    assert reply.status_code == 200 and photographed.status_code == 200, (reply.text, photographed.text)
    (scan,), (image,) = reply.json()["files"], photographed.json()["files"]
    assert scan["status"] == "created" and scan["pages"] == 1 and scan["ocr_pages"] == [1], scan
    # kept with the file: the same bytes again (not parsed again) and the listing say which pages were OCR'd
    assert [(f["status"], f["ocr_pages"]) for f in again.json()["files"]] == [("unchanged", [1]), ("created", [])]
    assert listed["cdd-scan.pdf"]["ocr_pages"] == [1] and listed["notes.md"]["ocr_pages"] == [], listed
    assert image["status"] == "created" and image["format"] == "png" and image["ocr_pages"] == [1], image
    assert english[0]["document_id"] == "cdd-scan.pdf" and english[0]["page"] == 1
    assert english[0]["citation"].startswith("cdd-scan.pdf, p. 1"), english[0]
    assert chinese[0]["document_id"] == "gong.png" and "锣鼓" in chinese[0]["text"], chinese[0]
    assert original.status_code == 200 and original.headers["content-type"] == "image/png"


def test_a_question_about_one_row_of_a_long_table_finds_it_under_its_header(live):
    """A 120-row price table in a DOCX and a port table in an HTML page: the row a question names comes back in a
    passage that begins with the table's header row (what the prompt then shows the model)."""
    page = ("<html><body><h1>Ports</h1><p>Which service listens where.</p><table><tr><th>Service</th><th>Port</th>"
            "<th>Protocol</th></tr>" + "".join(f"<tr><td>service-{i}</td><td>{7000 + i}</td><td>tcp</td></tr>"
                                              for i in range(150)) + "</table></body></html>")
    with live.client() as c:
        reply = _upload(c, [("catalogue.docx", catalogue_docx([HEADER, *ROWS], marked=0)),
                            ("ports.html", page.encode())], partition="tables")
        pump = c.post("/v1/search", json={"query": "price of pump P-087", "partitions": ["tables"], "k": 5})
        port = c.post("/v1/search", json={"query": "which port does service-123 use", "partitions": ["tables"],
                                          "k": 5})
    assert reply.status_code == 200 and all(f["status"] == "created" for f in reply.json()["files"]), reply.text
    # the passages the prompt would get (k = 5): the one holding the row, its whole line, under the header
    (row,) = [hit for hit in pump.json()["results"] if "\nPump P-087 | 97 | 635\n" in hit["text"]]
    assert row["document_id"] == "catalogue.docx" and row["section"] == ["Prices"], row
    assert row["text"].startswith(" | ".join(HEADER) + "\n"), row
    (row,) = [hit for hit in port.json()["results"] if "\nservice-123 | 7123 | tcp\n" in hit["text"]]
    assert row["document_id"] == "ports.html" and row["text"].startswith("Service | Port | Protocol\n"), row


def test_search_results_cite_file_page_and_original_comes_back(live):
    pdf = GOOD[1]
    with live.client() as c:
        assert _upload(c, [(pdf.name, pdf.read_bytes())]).status_code == 200
        title = json.loads(next(line for line in (DATA / "scifact_files" / "corpus.jsonl").open()
                                if json.loads(line)["_id"] == pdf.stem))["title"]
        hits = c.post("/v1/search", json={"query": title, "partitions": ["docs"], "k": 3}).json()["results"]
        original = c.get(f"/v1/documents/{pdf.name}/file")
        other = c.get(f"/v1/documents/{pdf.name}/file", headers={"Authorization": f"Bearer {live.keys['other']}"})
    top = hits[0]
    assert top["document_id"] == pdf.name and top["file"] == pdf.name
    assert top["page"] == 1 and top["citation"].startswith(f"{pdf.name}, p. 1")
    assert top["title"] == title
    assert original.status_code == 200 and original.content == pdf.read_bytes()
    assert original.headers["content-type"] == "application/pdf"
    assert original.headers["content-disposition"].startswith("attachment;")
    assert other.status_code == 404, "another tenant's file is not found"


def test_slides_headings_and_encodings_arrive_with_page_and_section(live):
    """A PowerPoint deck, Markdown with headings, Big5 text and UTF-16 HTML over HTTP: the format told from the
    bytes (the names say .bin), slides as pages, headings as sections, each encoding decoded."""
    from test_parse_formats import deck_bytes

    files = [("deck.bin", deck_bytes("Q3 business review")),
             ("manual.bin", b"# Pump manual\n\n## Restarting\n\nHold the red button for five seconds to restart "
                            b"the pump.\n\n## Warranty\n\nThe warranty lasts two years.\n"),
             ("big5.bin", "\u6c34\u6cf5\u7684\u4fdd\u4fee\u671f\u70ba\u5169\u5e74\uff0c\u8acb\u4fdd\u7559"
                          "\u767c\u7968\u3002\u6c34\u6cf5\u6bcf\u5e74\u6aa2\u67e5\u4e00\u6b21\u3002".encode("big5")),
             ("utf16.bin", "<html><head><title>Boiler</title></head><body><nav>Home | About</nav><main><h1>Boiler"
                           "</h1><p>The boiler restarts itself after a power cut.</p></main></body></html>"
              .encode("utf-16"))]
    with live.client() as c:
        reply = _upload(c, files, partition="mixed")

        def top(query: str) -> dict:
            return c.post("/v1/search", json={"query": query, "partitions": ["mixed"], "k": 1}).json()["results"][0]

        slide, heading = top("Revenue rose 12% costs fell"), top("hold the red button to restart the pump")
        listing = _listing(c, "mixed")
        chinese, html = top("\u4fdd\u4fee\u671f"), top("boiler restarts after a power cut")
    assert reply.status_code == 200, reply.text
    assert [(f["status"], f["format"]) for f in reply.json()["files"]] == [
        ("created", "pptx"), ("created", "markdown"), ("created", "text"), ("created", "html")], reply.text
    assert slide["file"] == "deck.bin" and slide["page"] == 2 and slide["section"] == ["Results"], slide
    assert listing["manual.bin"]["title"] == "Pump manual"
    assert heading["file"] == "manual.bin" and heading["section"] == ["Restarting"], heading  # the H1 is the title
    assert "\u4fdd\u4fee\u671f\u70ba\u5169\u5e74" in chinese["text"], chinese["text"]
    assert html["file"] == "utf16.bin" and "power cut" in html["text"] and "About" not in html["text"], html


def test_same_file_again_is_unchanged_changed_bytes_update_and_delete_drops_the_original(live):
    name = "memo.md"
    with live.client() as c:
        first = _upload(c, [(name, b"# Memo\n\nThe pump is serviced every March.\n")], partition="memos")
        again = _upload(c, [(name, b"# Memo\n\nThe pump is serviced every March.\n")], partition="memos")
        changed = _upload(c, [(name, b"# Memo\n\nThe pump is serviced every October.\n")], partition="memos")
        sha = changed.json()["files"][0]["sha256"]
        blob = live.settings.files_dir / sha[:2] / sha
        had_blob = blob.exists()
        gone = c.delete(f"/v1/documents/{name}", params={"partition": "memos"})
        after = c.get(f"/v1/documents/{name}/file")
    assert [r.json()["files"][0]["status"] for r in (first, again, changed)] == ["created", "unchanged", "updated"]
    assert first.json()["files"][0]["sha256"] != sha
    assert not (live.settings.files_dir / first.json()["files"][0]["sha256"][:2]
                / first.json()["files"][0]["sha256"]).exists(), "the replaced original is removed"
    assert had_blob and gone.status_code == 200 and not blob.exists()
    assert after.status_code == 404


def test_a_request_whose_every_file_failed_says_why_with_the_right_status(live):
    with live.client() as c:
        unsupported = _upload(c, [("a.gif", b"GIF89a" + bytes(64)), ("b.bin", bytes(range(256)) * 8)],
                              partition="none")
        too_large = _upload(c, [("big.txt", b"x " * 1_100_000)], partition="none")
        mixed = _upload(c, [("a.png", png()), ("scan.pdf", scanned_pdf())], partition="none")
        listing = c.get("/v1/documents", params={"partition": "none"})
    assert unsupported.status_code == 415, unsupported.text
    assert "PNG, JPEG and TIFF images (read by OCR)" in unsupported.json()["supported"]
    assert too_large.status_code == 413 and too_large.json()["files"][0]["error"]["code"] == "too_large"
    assert mixed.status_code == 422
    assert listing.status_code == 404, "no partition was created for requests that stored nothing"


@pytest.mark.parametrize("case", ["json_body", "no_boundary", "unknown_field", "field_as_file_name", "too_many_files",
                                  "bad_metadata", "deep_metadata", "no_partition", "no_files", "declared_too_large",
                                  "chunked_too_large", "control_chars_in_name", "other_tenant"])
def test_hostile_upload_requests_get_a_clear_error(live, case):
    with live.client() as c:
        before = _listing(c)
        if case == "json_body":
            reply = c.post("/v1/files", json={"partition": "docs"})
        elif case == "no_boundary":
            reply = c.post("/v1/files", content=b"--x\r\nnonsense", headers={"content-type": "multipart/form-data"})
        elif case == "unknown_field":
            reply = _upload(c, [("a.txt", b"hello there")], colour="blue")
        elif case == "field_as_file_name":
            reply = c.post("/v1/files", data={"partition": "docs"}, files=[("upload", ("a.txt", b"hi", "text/plain"))])
        elif case == "too_many_files":
            reply = _upload(c, [(f"f{i}.txt", b"hello") for i in range(21)])
        elif case == "bad_metadata":
            reply = _upload(c, [("a.txt", b"hello there")], metadata="{not json")
        elif case == "deep_metadata":  # within the field's 64 KiB: json.loads would recurse past Python's limit
            reply = _upload(c, [("a.txt", b"hello there")], metadata='{"a":' + "[" * 20_000 + "]" * 20_000 + "}")
        elif case == "chunked_too_large":  # no Content-Length to refuse it by: counted as it arrives
            head = b'--B\r\nContent-Disposition: form-data; name="file"; filename="big.txt"\r\n\r\n'
            chunks = iter([head] + [b"x" * 1_000_000] * 9)
            reply = c.post("/v1/files", content=chunks, headers={"content-type": "multipart/form-data; boundary=B"})
        elif case == "no_partition":
            reply = c.post("/v1/files", files=[("file", ("a.txt", b"hello", "text/plain"))])
        elif case == "no_files":
            reply = c.post("/v1/files", data={"partition": "docs"}, files=[("x", ("", b"", "text/plain"))])
        elif case == "declared_too_large":
            reply = c.post("/v1/files", content=b"x" * 8_000_001,
                           headers={"content-type": "multipart/form-data; boundary=x"})
        elif case == "control_chars_in_name":
            body = (b'--B\r\nContent-Disposition: form-data; name="partition"\r\n\r\ndocs\r\n--B\r\n'
                    b'Content-Disposition: form-data; name="file"; filename="a\x01b.txt"\r\n\r\nhello\r\n--B--\r\n')
            reply = c.post("/v1/files", content=body, headers={"content-type": "multipart/form-data; boundary=B"})
        else:
            reply = _upload(c, [("a.txt", b"hello there")], tenant="other")
        after = _listing(c)
    expected = {"json_body": 415, "no_boundary": 400, "unknown_field": 422, "field_as_file_name": 422,
                "too_many_files": 400, "bad_metadata": 422, "deep_metadata": 422, "no_partition": 422,
                "no_files": 422, "declared_too_large": 413, "chunked_too_large": 413, "control_chars_in_name": 422,
                "other_tenant": 403}[case]
    assert reply.status_code == expected, reply.text
    assert reply.json()["error"]["message"]
    assert after == before, "a refused request changes nothing"


def test_an_answer_and_a_chat_completion_cite_file_and_page(llm_served):
    """Real engines: the sources of an answer name the file and page its passages came from."""
    live, _ = llm_served
    pdf = GOOD[1]
    title = json.loads(next(line for line in (DATA / "scifact_files" / "corpus.jsonl").open()
                            if json.loads(line)["_id"] == pdf.stem))["title"]
    with live.client(live.keys["other"]) as c:  # its own tenant: the other answer tests see nothing of it
        stored = _upload(c, [(pdf.name, pdf.read_bytes())], partition="reports")
        answer = c.post("/v1/ask", json={"question": f"What is known about this: {title}?", "model": "small",
                                         "max_tokens": 8, "partitions": ["reports"]})
        chat = c.post("/v1/chat/completions", json={"model": "small", "max_tokens": 8, "messages": [
            {"role": "user", "content": f"What is known about this: {title}?"}]})
    assert stored.status_code == 200, stored.text
    assert answer.status_code == 200 and answer.json()["degraded"] is False, answer.text
    for sources in (answer.json()["sources"], chat.json()["sources"]):
        first = sources[0]
        assert first["file"] == pdf.name and first["page"] == 1, first
        assert first["citation"].startswith(f"{pdf.name}, p. 1")


def test_a_parser_past_its_time_or_memory_is_stopped_and_the_server_goes_on(tmp_path, models_dir):
    """Real limits on real parses: a big text file takes longer than parse.timeout_s, a big one needs more memory
    than parse.max_memory_mib; each is refused on its own, the small file beside it is stored, and the next
    request is parsed by a fresh worker."""
    big = ("Lorem ipsum dolor sit amet, consectetur adipiscing elit. " * 300_000).encode()  # ~17 MB
    small = b"# Boiler\n\nThe boiler restarts itself after a power cut.\n"
    slow = make_settings(tmp_path / "slow", models_dir, parse_timeout_s="0.3", parse_max_memory_mib="0",
                         parse_max_file_bytes="40000000", parse_max_upload_bytes="60000000")
    tight = make_settings(tmp_path / "tight", models_dir, parse_max_memory_mib="32",
                          parse_max_file_bytes="40000000", parse_max_upload_bytes="60000000")
    replies = {}
    for name, settings in (("slow", slow), ("tight", tight)):
        with LiveServer(settings) as live, live.client() as c:
            first = _upload(c, [("big.txt", big), ("small.md", small)], tenant="t")
            then = _upload(c, [("after.md", small.replace(b"Boiler", b"Pump"))], tenant="t")
            health = c.get("/healthz")
            metrics = c.get("/metrics").text
            replies[name] = (first, then, health, _listing_of(c, "t"))
        stopped = "appliance_parser_timeouts 1.0" if name == "slow" else "appliance_parser_out_of_memory 1.0"
        assert stopped in metrics and "appliance_parser_jobs 3.0" in metrics, metrics
    for name, code in (("slow", "parse_timeout"), ("tight", "parse_out_of_memory")):
        first, then, health, listing = replies[name]
        assert first.status_code == 200, first.text
        by_name = {f["file"]: f for f in first.json()["files"]}
        assert by_name["big.txt"]["error"]["code"] == code, by_name["big.txt"]
        assert by_name["small.md"]["status"] == "created"
        assert then.status_code == 200 and then.json()["files"][0]["status"] == "created"
        assert health.status_code == 200
        assert set(listing) == {"small.md", "after.md"}


def _listing_of(client: httpx.Client, tenant: str) -> dict[str, dict]:
    reply = client.get("/v1/documents", params={"partition": "docs", "tenant": tenant})
    return {d["id"]: d for d in reply.json()["documents"]}


def test_reindex_parses_kept_files_again_when_the_parser_is_newer(tmp_path, models_dir, monkeypatch):
    """The original bytes are kept: a newer parser (PARSER_VERSION bumped) reads them again on `reparse`; the
    same parser does only when forced."""
    import appliance.library.files as file_ingest
    from appliance.library import FileInput
    from appliance.wiring import open_services
    from support import run

    pdf, md = GOOD[0], GOOD[4]

    async def scenario():
        async with open_services(make_settings(tmp_path, models_dir), warm_up=False, generation=False) as services:
            files = [FileInput(p.name, p.read_bytes()) for p in (pdf, md)]
            first = await services.files.ingest("t", "docs", files)
            same = await services.files.reparse("t")
            monkeypatch.setattr(file_ingest, "PARSER_VERSION", file_ingest.PARSER_VERSION + 1)
            newer = await services.files.reparse("t")
            forced = await services.files.reparse("t", force=True)
            listing = services.library.list_documents("t", "docs")
            return first, same, newer, forced, listing

    first, same, newer, forced, listing = run(scenario())
    assert [f.status for f in first.files] == ["created", "created"]
    assert same == [], "nothing to do while the parser is the same"
    assert [f.status for f in newer[0].files] == ["updated", "updated"]
    assert [f.status for f in forced[0].files] == ["updated", "updated"]
    assert {d.file.parser_version for d in listing} == {file_ingest.PARSER_VERSION}


def test_one_tenants_slow_files_do_not_hold_up_another_tenants_file(tmp_path, models_dir):
    """Files that hang their parser (the fault is injected: each takes the whole parse timeout) from one tenant,
    then one file from another: the pool takes the requests' files in turn, so the second tenant's file is stored
    while the first tenant's are still queued (first come, first served over all files would put it last)."""
    from appliance.library import FileIngester, FileInput
    from appliance.parse import ParseLimits, ParserPool
    from appliance.wiring import open_services
    from support import run
    from test_parse_pool import _scripted

    async def scenario():
        settings = make_settings(tmp_path, models_dir)
        async with open_services(settings, warm_up=False, generation=False) as services, \
                ParserPool(2, 1.0, 512, ParseLimits(), _scripted) as pool:
            files = FileIngester(services.library, pool, settings.chunking, settings.parse.max_file_bytes)
            slow = asyncio.create_task(files.ingest("flood", "docs", [FileInput(f"h{i}", b"hang") for i in range(8)]))
            await asyncio.sleep(0.2)  # the flood's files are queued first
            calm = await files.ingest("calm", "docs", [FileInput("note.txt", b"the pump restarts at night")])
            flood_done_before = slow.done()
            flooded = await slow
            return calm, flood_done_before, flooded

    calm, flood_done_before, flooded = run(scenario())
    assert [f.status for f in calm.files] == ["created"], calm.files
    assert not flood_done_before, "the calm tenant's file waited for every file of the flood"
    assert [f.error.code for f in flooded.files] == ["parse_timeout"] * 8


def test_a_download_is_named_for_its_detected_format_and_streamed_from_the_store(live):
    page = b"<!doctype html><html><body><h1>Boiler</h1><p>The boiler restarts after a power cut.</p></body></html>"
    note = b"The valve is replaced every second year, in spring, by the site engineer.\n" * 40
    with live.client() as c:
        assert _upload(c, [("evil.hta", page), ("run.bat", note)], partition="named").status_code == 200
        html = c.get("/v1/documents/evil.hta/file", params={"partition": "named"})
        text = c.get("/v1/documents/run.bat/file", params={"partition": "named"})
        part = c.get("/v1/documents/run.bat/file", params={"partition": "named"}, headers={"Range": "bytes=0-9"})
        other = c.get("/v1/documents/run.bat/file", params={"partition": "named"},
                      headers={"Authorization": f"Bearer {live.keys['other']}"})
    assert html.status_code == 200 and html.content == page
    assert html.headers["content-disposition"] == "attachment; filename*=UTF-8''evil.html", "never .hta"
    assert html.headers["content-type"].startswith("text/html")
    assert html.headers["x-content-type-options"] == "nosniff" and html.headers["content-security-policy"] == "sandbox"
    assert html.headers["etag"] == f'"{hashlib.sha256(page).hexdigest()}"'
    assert text.content == note and text.headers["content-disposition"].endswith("''run.txt"), "never .bat"
    # read from the kept file as it is sent (a range of it, too), not loaded whole first
    assert part.status_code == 206 and part.content == note[:10], part.headers
    assert other.status_code == 404 and other.json()["error"]["field"] == "id"


def test_kept_files_count_against_the_tenants_file_quota(tmp_path, models_dir):
    settings = make_settings(tmp_path, models_dir, quota_max_file_bytes="2500")
    first, second = b"The pump is serviced every March. " * 40, b"The valve is replaced yearly. " * 50
    with LiveServer(settings) as live, live.client() as c:
        def upload(name: str, data: bytes, tenant: str = "acme") -> httpx.Response:
            return _upload(c, [(name, data)], tenant=tenant)

        kept = upload("a.txt", first)  # 1,360 bytes
        same = upload("b.txt", first)  # the same file again: the store keeps it once, so it counts once
        refused = upload("c.txt", second)  # 1,500 more would pass 2,500
        listing = c.get("/v1/documents", params={"tenant": "acme", "partition": "docs"}).json()
        other = upload("c.txt", second, tenant="other")  # another tenant's own quota
        assert c.delete("/v1/documents/a.txt", params={"tenant": "acme", "partition": "docs"}).status_code == 200
        still = upload("c.txt", second)  # b.txt still keeps the file: nothing was freed
        assert c.delete("/v1/documents/b.txt", params={"tenant": "acme", "partition": "docs"}).status_code == 200
        freed = upload("c.txt", second)
        # at 1,500 of 2,500: c.txt replaced by a 2,200-byte file frees its own 1,500 first (it was refused while a
        # replaced file's bytes were freed only after the write); a 2,600-byte one would still pass the limit
        replaced = upload("c.txt", b"The filter is cleaned weekly. " * 73)
        too_big = upload("c.txt", b"The belt is checked monthly. " * 90)
        kept_now = c.get("/v1/documents/c.txt/file", params={"tenant": "acme", "partition": "docs"})
    assert replaced.status_code == 200, replaced.text
    assert too_big.status_code == 413 and "freed by the documents it replaces" in too_big.text, too_big.text
    assert kept_now.content == b"The filter is cleaned weekly. " * 73
    assert kept.status_code == 200 and same.status_code == 200, same.text
    assert refused.status_code == 413, refused.text
    error = refused.json()["error"]
    assert error["code"] == "quota_exceeded" and "quota.max_file_bytes" in error["message"], error
    assert error["field"] == "file"
    assert {d["id"] for d in listing["documents"]} == {"a.txt", "b.txt"}, "nothing of the refused file stored"
    assert other.status_code == 200 and freed.status_code == 200, freed.text
    assert still.status_code == 413, still.text


def test_a_tenant_flooding_many_requests_does_not_hold_up_another_tenants_file(tmp_path, models_dir):
    """A tenant's flood as many concurrent one-file requests (each request is bounded to `workers` files, so only
    the pool's turns between tenants keep this fair): the calm tenant's file takes about one parse longer than
    alone, not the flood's 12 / 2 workers x 0.5 s."""
    from appliance.library import FileIngester, FileInput
    from appliance.parse import ParseLimits, ParserPool
    from appliance.wiring import open_services
    from support import run
    from test_parse_pool import _scripted

    job = b"sleep 0.5"

    async def timed(files, name: str):
        start = time.perf_counter()
        result = await files.ingest("calm", "docs", [FileInput(name, job)])
        return result, time.perf_counter() - start

    async def scenario():
        settings = make_settings(tmp_path, models_dir)
        async with open_services(settings, warm_up=False, generation=False) as services, \
                ParserPool(2, 30.0, 512, ParseLimits(), _scripted) as pool:
            files = FileIngester(services.library, pool, settings.chunking, settings.parse.max_file_bytes)
            _, alone = await timed(files, "first.txt")
            flood = [asyncio.create_task(files.ingest("flood", "docs", [FileInput(f"f{i}", job)])) for i in range(12)]
            await asyncio.sleep(0.2)
            calm, behind = await timed(files, "second.txt")
            await asyncio.gather(*flood)
            return calm, alone, behind

    calm, alone, behind = run(scenario())
    assert [f.status for f in calm.files] == ["created"], calm.files
    assert behind < alone + 1.5, f"alone {alone:.2f} s, behind the flood {behind:.2f} s"
