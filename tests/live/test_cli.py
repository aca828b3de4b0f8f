"""The `appliance` command line, run as a user runs it: a subprocess with settings from the environment."""
import json
import os
import subprocess
import sys
from pathlib import Path

from support import DATA, SCIFACT, LiveServer, beir_slice, free_port, make_settings, write_keys


def cli(*args: str, data_dir: Path, models_dir: Path, port: int, timeout: int = 600,
        key: str | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`key`: the API key in $APPLIANCE_API_KEY (none otherwise, whatever the test runner has); `env`: more
    settings."""
    extra = env or {}
    env = {**os.environ, "APPLIANCE_DATA_DIR": str(data_dir), "APPLIANCE_MODELS_DIR": str(models_dir),
           "APPLIANCE_SERVER_PORT": str(port), "APPLIANCE_DEMO_CORPUS": "false", "APPLIANCE_LOG_LEVEL": "warning"}
    env.pop("APPLIANCE_API_KEY", None)
    env.update({"APPLIANCE_API_KEY": key} if key else {})
    env.update(extra)
    return subprocess.run([sys.executable, "-m", "appliance", *args], capture_output=True, text=True, env=env,
                          timeout=timeout)


def write_beir(folder: Path, queries: int, distractors: int) -> None:
    data = beir_slice(SCIFACT, queries, distractors)
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in data.corpus))
    (folder / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": t}) + "\n"
                                                  for q, t in data.queries.items()))
    rows = [f"{q}\t{d}\t{s}" for q, docs in data.qrels.items() for d, s in docs.items()]
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "\n".join(rows) + "\n")


def test_ingest_search_reindex_locally(tmp_path, models_dir):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "pump.md").write_text("# Pump\nError code QZ-991 means the filter must be replaced.")
    (docs / "boiler.txt").write_text("The boiler restarts itself after a power cut of less than a minute.")
    beir = tmp_path / "beir"
    write_beir(beir, queries=3, distractors=5)
    data, port = tmp_path / "state", free_port()

    done = cli("ingest", "--tenant", "ops", "--partition", "manuals", str(docs), str(beir / "corpus.jsonl"),
               data_dir=data, models_dir=models_dir, port=port)
    assert done.returncode == 0, done.stderr
    assert "created" in done.stdout

    found = cli("search", "--tenant", "ops", "--json", "--k", "3", "what does QZ-991 mean",
                data_dir=data, models_dir=models_dir, port=port)
    assert found.returncode == 0, found.stderr
    hits = json.loads(found.stdout)["results"]
    assert hits[0]["document_id"].endswith("pump.md")

    text = cli("search", "--tenant", "ops", "boiler power cut", data_dir=data, models_dir=models_dir, port=port)
    assert text.returncode == 0 and "boiler" in text.stdout.splitlines()[0]

    again = cli("ingest", "--tenant", "ops", "--partition", "manuals", str(docs),
                data_dir=data, models_dir=models_dir, port=port)
    assert again.returncode == 0 and again.stdout.strip().endswith("2 unchanged")

    rebuilt = cli("reindex", data_dir=data, models_dir=models_dir, port=port)
    assert rebuilt.returncode == 0 and "ops/manuals: indexed at version 2" in rebuilt.stdout  # files, then the corpus


def test_ingest_goes_through_a_running_server(tmp_path, models_dir):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("Lighthouse keepers logged every passing ship by hand.")
    with LiveServer(make_settings(tmp_path / "state", models_dir)) as live:
        done = cli("ingest", "--tenant", "t", "--partition", "p", str(docs), data_dir=tmp_path / "unused",
                   models_dir=models_dir, port=live.port)
        assert done.returncode == 0, done.stderr
        with live.client() as c:
            hits = c.post("/v1/search", json={"tenant": "t", "query": "lighthouse ships"}).json()["results"]
    assert hits[0]["document_id"].endswith("a.md")
    assert not (tmp_path / "unused").exists()  # the CLI did not open a data folder of its own


def test_server_commands_send_the_api_key(tmp_path, models_dir):
    """`--key` or $APPLIANCE_API_KEY, on ingest, search and ask; the output is the one without keys."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("Lighthouse keepers logged every passing ship by hand.")
    keys_file, keys = write_keys(tmp_path, ["acme"])
    settings = make_settings(tmp_path / "state", models_dir, admission_keys_file=str(keys_file))
    with LiveServer(settings) as live:
        def run(*args: str, key: str | None = None) -> subprocess.CompletedProcess:
            return cli(*args, data_dir=tmp_path / "unused", models_dir=models_dir, port=live.port, key=key)

        ingested = run("ingest", "--key", keys["acme"], "--tenant", "acme", "--partition", "p", str(docs))
        found = run("search", "--tenant", "acme", "lighthouse ships", key=keys["acme"])
        asked = run("ask", "--tenant", "acme", "who logged the ships?", key=keys["acme"])
        refused = run("search", "--tenant", "acme", "lighthouse ships")
    assert ingested.returncode == 0 and ingested.stdout.splitlines() == ["created   a.md  text, 1 chunks", "1 created"], ingested.stdout
    assert found.returncode == 0 and found.stdout.startswith(" 1. [p] ") and "a.md" in found.stdout, found.stderr
    assert asked.returncode == 0 and asked.stderr.splitlines()[-1] == "[1] a", asked.stderr
    answer, _, summary = asked.stdout.rpartition("\n-- ")
    assert "Lighthouse keepers" in answer and summary.startswith("retrieval only (generation is turned off")
    assert refused.returncode != 0 and "server answered 401" in refused.stderr
    assert not (tmp_path / "unused").exists()  # every command went through the server


def test_eval_retrieval_prints_the_metrics_as_json(tmp_path, models_dir):
    beir = tmp_path / "beir"
    write_beir(beir, queries=8, distractors=20)
    done = cli("eval", "retrieval", "--data", str(beir), "--json", "--dense-weights", "0,0.5,10",
               data_dir=tmp_path / "state", models_dir=models_dir, port=free_port())
    wrong = cli("eval", "retrieval", "--data", str(beir), "--dense-weights", "0,11", data_dir=tmp_path / "state",
                models_dir=models_dir, port=free_port())
    assert done.returncode == 0, done.stderr
    assert wrong.returncode == 2 and "0 to 10" in wrong.stderr
    report = json.loads(done.stdout)
    # the same queries with the partition given each weight of its own; 0.5 is English's default, so the same
    by_weight = report["by_dense_weight"]
    assert list(by_weight) == ["0", "0.5", "10"] and all(0 < w["ndcg@10"] <= 1.0 for w in by_weight.values())
    assert by_weight["0.5"] == {k: report[k] for k in ("ndcg@10", "recall@100", "mrr@10")}
    assert {"ndcg@10", "recall@100", "mrr@10", "p50_ms", "p99_ms"} <= set(report)
    assert report["queries"] == 8 and 0.5 < report["ndcg@10"] <= 1.0 and report["recall@100"] > 0.9
    assert 0 < report["p50_ms"] <= report["p99_ms"]
    # what the index costs on disk, measured with the quality in the same run (28 abstracts: under the codebook's
    # threshold, so int8 at 388 bytes a token)
    assert report["chunks"] >= 28 and report["token_codec"] == "int8"
    assert 0 < report["token_vector_bytes"] < report["index_bytes"]


def test_reindex_tokens_recodes_int8_vectors_from_the_command_line(tmp_path, models_dir):
    beir = tmp_path / "beir"
    write_beir(beir, queries=2, distractors=20)
    data, port = tmp_path / "state", free_port()
    small = {"APPLIANCE_INDEX_CODEBOOK_CENTROIDS": "64", "APPLIANCE_INDEX_CODEBOOK_MIN_TOKENS": "1024"}
    stored = cli("ingest", "--tenant", "t", "--partition", "p", str(beir / "corpus.jsonl"), data_dir=data,
                 models_dir=models_dir, port=port, env={"APPLIANCE_INDEX_TOKEN_CODEC": "int8"})
    assert stored.returncode == 0, stored.stderr
    wrong = cli("reindex", "--tokens", "--language", "en", "--partition", "p", data_dir=data,
                models_dir=models_dir, port=port, env=small)
    assert wrong.returncode != 0 and "--tokens" in wrong.stderr
    recoded = cli("reindex", "--tokens", data_dir=data, models_dir=models_dir, port=port, env=small)
    assert recoded.returncode == 0, recoded.stderr
    assert "t/p: token vectors re-coded at version 1" in recoded.stdout
    again = cli("reindex", "--tokens", data_dir=data, models_dir=models_dir, port=port, env=small)
    assert again.returncode == 0 and "nothing to re-code" in again.stdout
    found = cli("search", "--tenant", "t", "--json", "--k", "3", "vitamin D and bone density", data_dir=data,
                models_dir=models_dir, port=port, env=small)
    assert found.returncode == 0 and len(json.loads(found.stdout)["results"]) == 3


def test_bad_settings_stop_the_cli_with_a_clear_message(tmp_path, models_dir):
    env = {**os.environ, "APPLIANCE_SERVER_PORT": "eighty"}
    done = subprocess.run([sys.executable, "-m", "appliance", "search", "--tenant", "t", "q"], capture_output=True,
                          text=True, env=env, timeout=60)
    assert done.returncode != 0 and "APPLIANCE_SERVER_PORT: expected an integer" in done.stderr


def test_eval_router_prints_the_shares_as_json(tmp_path, models_dir):
    """On the training questions themselves (the held-out figures are in tests/unit/test_router.py)."""
    done = cli("eval", "router", "--questions", str(DATA / "router_questions" / "questions.jsonl"), "--json",
               data_dir=tmp_path / "state", models_dir=models_dir, port=free_port())
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["simple_to_small"] >= 0.9 and report["complex_to_large"] >= 0.9
    assert 0.75 <= report["small_share_80_20"] <= 1 and 0 < report["p99_decision_ms"] < 50


def test_keys_add_then_cache_list_and_delete_on_the_server(tmp_path, models_dir):
    keys_file = tmp_path / "keys.toml"
    made = cli("keys", "add", "--tenant", "acme", "--name", "wiki bot", "--file", str(keys_file),
               data_dir=tmp_path, models_dir=models_dir, port=free_port())
    assert made.returncode == 0, made.stderr
    key = made.stdout.strip()
    assert key.startswith("rak_") and key not in keys_file.read_text() and 'tenant = "acme"' in keys_file.read_text()
    refused = cli("keys", "add", "--tenant", "../x", "--file", str(keys_file), data_dir=tmp_path,
                  models_dir=models_dir, port=free_port())
    assert refused.returncode != 0 and "tenant" in refused.stderr
    settings = make_settings(tmp_path / "state", models_dir, admission_keys_file=str(keys_file))
    with LiveServer(settings) as live:
        listed = cli("cache", "list", "--key", key, "--url", live.url, data_dir=tmp_path, models_dir=models_dir,
                     port=live.port)
        wrong = cli("cache", "list", "--key", "rak_wrong", "--url", live.url, data_dir=tmp_path,
                    models_dir=models_dir, port=live.port)
        missing = cli("cache", "delete", "7", "--key", key, "--url", live.url, data_dir=tmp_path,
                      models_dir=models_dir, port=live.port)
    assert listed.returncode == 0 and json.loads(listed.stdout) == {"tenant": "acme", "entries": []}, listed.stderr
    assert wrong.returncode != 0 and "401" in wrong.stderr
    assert missing.returncode != 0 and "404" in missing.stderr


def test_ingest_sync_mirrors_a_folder_and_reports_each_file(tmp_path, models_dir):
    from hostile_files import SCIFACT_FILES, scanned_pdf

    folder = tmp_path / "share"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.md").write_text("# Pumps\n\nThe pump is serviced every March.\n")
    (folder / "sub" / "b.txt").write_text("The boiler restarts itself after a power cut.")
    pdf = next(SCIFACT_FILES.glob("*.pdf"))
    (folder / "c.pdf").write_bytes(pdf.read_bytes())
    (folder / ".hidden.txt").write_text("not ingested")
    data, port = tmp_path / "state", free_port()

    def sync() -> subprocess.CompletedProcess:
        return cli("ingest", "--sync", "--tenant", "ops", "--partition", "share", str(folder), data_dir=data,
                   models_dir=models_dir, port=port)

    first = sync()
    (folder / "a.md").write_text("# Pumps\n\nThe pump is serviced every October.\n")
    (folder / "sub" / "b.txt").unlink()
    (folder / "d.pdf").write_bytes(scanned_pdf())
    second = sync()
    found = cli("search", "--tenant", "ops", "--json", "--k", "10", "boiler power cut pump serviced", data_dir=data,
                models_dir=models_dir, port=port)
    lines = second.stdout.splitlines()
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines()[-1] == "3 created"
    assert second.returncode == 1, "a file that failed makes the exit status 1"
    assert lines[-1] == "1 deleted, 1 error, 1 unchanged, 1 updated"
    assert any(line.startswith("updated   a.md") for line in lines)
    assert any(line.startswith("deleted   sub/b.txt") for line in lines)
    assert any(line.startswith("error     d.pdf  no_text_layer:") for line in lines)
    ids = {h["document_id"] for h in json.loads(found.stdout)["results"]}
    assert "sub/b.txt" not in ids and "a.md" in ids and ".hidden.txt" not in ids
    assert any("October" in h["text"] for h in json.loads(found.stdout)["results"])


def test_ingest_sync_through_a_running_server(tmp_path, models_dir):
    from hostile_files import SCIFACT_FILES, encrypted_pdf

    folder = tmp_path / "share"
    folder.mkdir()
    (folder / "a.md").write_text("# Lighthouses\n\nKeepers logged every passing ship by hand.\n")
    (folder / "b.txt").write_text("The boiler restarts itself after a power cut.")
    (folder / "locked.pdf").write_bytes(encrypted_pdf(next(SCIFACT_FILES.glob("*.pdf")).read_bytes()))
    with LiveServer(make_settings(tmp_path / "state", models_dir)) as live:
        def sync() -> subprocess.CompletedProcess:
            return cli("ingest", "--sync", "--tenant", "t", "--partition", "share", str(folder),
                       data_dir=tmp_path / "unused", models_dir=models_dir, port=live.port)

        with live.client() as c:
            kept = c.post("/v1/documents", json={"tenant": "t", "partition": "share",
                                                 "documents": [{"id": "typed", "text": "sent as text"}]})
            first = sync()
            (folder / "b.txt").unlink()
            (folder / "locked.pdf").unlink()
            second = sync()
            listing = c.get("/v1/documents", params={"tenant": "t", "partition": "share"}).json()["documents"]
    assert kept.status_code == 200
    assert first.returncode == 1 and first.stdout.splitlines()[-1] == "2 created, 1 error", first.stdout
    assert any(line.startswith("error     locked.pdf  encrypted:") for line in first.stdout.splitlines())
    assert second.returncode == 0 and second.stdout.splitlines()[-1] == "1 deleted, 1 unchanged", second.stdout
    assert [d["id"] for d in listing] == ["a.md", "typed"], "text documents are not mirrored away"
    assert not (tmp_path / "unused").exists()


def test_eval_retrieval_reads_a_folder_of_files_through_the_parsers(tmp_path, models_dir):
    source = DATA / "scifact_files"
    qrels = [line.split("\t") for line in (source / "qrels" / "test.tsv").read_text().splitlines()[1:]]
    files = sorted((source / "files").iterdir())[:60]
    stems = {p.stem for p in files}
    judged = [row for row in qrels if row[1] in stems]
    folder = tmp_path / "beir"
    (folder / "files").mkdir(parents=True)
    (folder / "qrels").mkdir()
    for path in files:
        (folder / "files" / path.name).symlink_to(path)
    (folder / "corpus.jsonl").write_text("".join(line + "\n" for line in (source / "corpus.jsonl").read_text()
                                                 .splitlines() if json.loads(line)["_id"] in stems))
    wanted = {row[0] for row in judged}
    (folder / "queries.jsonl").write_text("".join(line + "\n" for line in (source / "queries.jsonl").read_text()
                                                  .splitlines() if json.loads(line)["_id"] in wanted))
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join("\t".join(r) + "\n"
                                                                                       for r in judged))
    done = cli("eval", "retrieval", "--data", str(folder), "--json", data_dir=tmp_path / "state",
               models_dir=models_dir, port=free_port())
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["files"] == 60 and report["files_failed"] == 0
    assert report["queries"] == len(wanted) and report["ndcg@10"] > 0.5


def write_conversations(folder: Path, conversations: int, distractors: int) -> None:
    """The first doc2dial conversations, their qrels, their documents and a few others."""
    source = DATA / "doc2dial_conversations"
    lines = [line for line in (source / "conversations.jsonl").read_text().splitlines() if line.strip()]
    kept = lines[:conversations]
    ids = {json.loads(line)["id"] for line in kept}
    qrels = (source / "qrels" / "test.tsv").read_text().splitlines()
    rows = [qrels[0]] + [row for row in qrels[1:] if row.split("\t")[0].rsplit("_", 1)[0] in ids]
    wanted = {row.split("\t")[1] for row in rows[1:]}
    corpus = [line for line in (source / "corpus.jsonl").read_text().splitlines() if line.strip()]
    chosen = [c for c in corpus if json.loads(c)["_id"] in wanted]
    chosen += [c for c in corpus if json.loads(c)["_id"] not in wanted][:distractors]
    (folder / "qrels").mkdir(parents=True)
    (folder / "conversations.jsonl").write_text("\n".join(kept) + "\n")
    (folder / "corpus.jsonl").write_text("\n".join(chosen) + "\n")
    (folder / "qrels" / "test.tsv").write_text("\n".join(rows) + "\n")


def test_eval_conversations_prints_first_turns_and_follow_ups_apart(tmp_path, models_dir):
    folder = tmp_path / "conversations"
    write_conversations(folder, conversations=3, distractors=12)
    reports = {}
    for mode in ("raw", "expand"):
        done = cli("eval", "conversations", "--data", str(folder), "--mode", mode, "--json",
                   data_dir=tmp_path / "state", models_dir=models_dir, port=free_port())
        assert done.returncode == 0, done.stderr
        reports[mode] = json.loads(done.stdout)
    raw, expand = reports["raw"], reports["expand"]
    assert set(raw) == {"mode", "turns", "followups", "first_turn", "followup", "rewrite_p50_ms", "rewrite_p99_ms"}
    assert raw["turns"] > raw["followups"] >= 3 and set(raw["followup"]) == {"recall@10", "ndcg@10", "mrr@10"}
    assert raw["first_turn"] == expand["first_turn"], "a first turn goes as it is in every mode"
    assert expand["followup"]["ndcg@10"] > raw["followup"]["ndcg@10"], (expand["followup"], raw["followup"])
    assert raw["rewrite_p99_ms"] == 0 < expand["rewrite_p50_ms"] <= expand["rewrite_p99_ms"]


def test_eval_conversations_scores_standalone_questions_against_human_rewrites(tmp_path, models_dir):
    rewrites = DATA / "cast2019_rewrites" / "rewrites.jsonl"
    done = cli("eval", "conversations", "--rewrites", str(rewrites), "--mode", "raw", "--limit", "40", "--json",
               data_dir=tmp_path / "state", models_dir=models_dir, port=free_port())
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["pairs"] == 40 and report["mode"] == "raw"
    assert report["f1"] == report["raw_f1"] and 0.3 < report["raw_f1"] < 1.0, report
    both = cli("eval", "conversations", "--mode", "raw", data_dir=tmp_path / "state", models_dir=models_dir,
               port=free_port())
    assert both.returncode != 0 and "--data DIR or --rewrites FILE" in both.stderr


def test_ingest_reports_every_bad_file_and_stores_the_rest(tmp_path, models_dir):
    """Locally: corrupt, zip-bombed, scanned, unsupported and oversized files each get their reason, the good file
    is stored, the exit status is 1; a second run changes nothing."""
    from hostile_files import SCIFACT_FILES, png, scanned_pdf, truncated, zip_bomb_docx

    folder = tmp_path / "share"
    folder.mkdir()
    (folder / "good.md").write_text("# Pumps\n\nThe pump is serviced every March.\n")
    (folder / "cut.docx").write_bytes(truncated(next(SCIFACT_FILES.glob("*.docx")).read_bytes()))
    (folder / "bomb.docx").write_bytes(zip_bomb_docx(1024))
    (folder / "scan.pdf").write_bytes(scanned_pdf())
    (folder / "photo.png").write_bytes(png())
    (folder / "huge.txt").write_bytes(b"big " * 300_000)  # 1.2 MB against parse.max_file_bytes = 1 MB
    data, port = tmp_path / "state", free_port()

    def ingest() -> subprocess.CompletedProcess:
        return cli("ingest", "--tenant", "ops", "--partition", "share", str(folder), data_dir=data,
                   models_dir=models_dir, port=port, env={"APPLIANCE_PARSE_MAX_FILE_BYTES": "1000000"})

    first, second = ingest(), ingest()
    errors = {line.split()[1]: line.split()[2] for line in first.stdout.splitlines() if line.startswith("error")}
    assert first.returncode == 1, first.stderr
    assert errors == {"cut.docx": "corrupt_file:", "bomb.docx": "too_large:", "scan.pdf": "no_text_layer:",
                      "photo.png": "no_text_layer:", "huge.txt": "too_large:"}, first.stdout
    assert first.stdout.splitlines()[-1] == "1 created, 5 error"
    assert second.stdout.splitlines()[-1] == "5 error, 1 unchanged", second.stdout


def test_ingest_through_a_server_whose_upload_limit_a_batch_passes(tmp_path, models_dir):
    """A batch past the server's parse.max_upload_bytes is sent again file by file: the small files are stored,
    the big one is refused with the server's reason, and the run goes on to the end."""
    folder = tmp_path / "share"
    folder.mkdir()
    (folder / "a.md").write_text("# Lighthouses\n\nKeepers logged every passing ship by hand.\n")
    (folder / "b.txt").write_text("The boiler restarts itself after a power cut.")
    (folder / "big.txt").write_bytes(b"lots of words " * 20_000)  # 280 KB
    settings = make_settings(tmp_path / "state", models_dir, parse_max_upload_bytes="200000",
                             parse_max_file_bytes="200000")
    with LiveServer(settings) as live:
        done = cli("ingest", "--tenant", "t", "--partition", "share", str(folder), data_dir=tmp_path / "unused",
                   models_dir=models_dir, port=live.port)
        with live.client() as c:
            listing = c.get("/v1/documents", params={"tenant": "t", "partition": "share"}).json()["documents"]
    lines = done.stdout.splitlines()
    assert done.returncode == 1 and lines[-1] == "2 created, 1 error", done.stdout + done.stderr
    assert any(line.startswith("error     big.txt  body_too_large:") for line in lines), lines
    assert [d["id"] for d in listing] == ["a.md", "b.txt"]


def test_the_cli_reaches_a_server_that_serves_tls_itself(tmp_path, models_dir):
    """server.tls_cert_file on: `appliance ready` (the installer's upgrade check) and `appliance search` reach the
    box over https, its certificate checked against cluster.ca_file; without that, both dialled http:// and a
    TLS box's upgrade waited out its timeout and rolled back."""
    from test_cluster_files import make_box_cert, make_ca

    ca, ca_key, ca_cert = make_ca(tmp_path, "site-ca")
    cert, key = make_box_cert(tmp_path, ca_key, ca_cert)
    data = tmp_path / "state"
    tls = {"APPLIANCE_SERVER_TLS_CERT_FILE": str(cert), "APPLIANCE_SERVER_TLS_KEY_FILE": str(key),
           "APPLIANCE_CLUSTER_CA_FILE": str(ca)}
    settings = make_settings(data, models_dir, **{k.removeprefix("APPLIANCE_").lower(): v for k, v in tls.items()})
    with LiveServer(settings) as live:
        assert live.url.startswith("https://")
        with live.client() as c:
            assert c.post("/v1/documents", json={"tenant": "ops", "partition": "docs", "documents": [
                {"id": "boiler", "text": "The boiler restarts itself after a power cut."}]}).status_code == 200
        ready = cli("ready", data_dir=data, models_dir=models_dir, port=live.port, env=tls)
        found = cli("search", "--tenant", "ops", "--json", "boiler power cut", data_dir=data, models_dir=models_dir,
                    port=live.port, env=tls)
    assert ready.returncode == 0 and f"ready at https://127.0.0.1:{live.port}/readyz" in ready.stdout, ready
    assert found.returncode == 0, found.stderr
    assert json.loads(found.stdout)["results"][0]["document_id"] == "boiler"
