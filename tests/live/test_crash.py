"""kill -9 during ingest: every acknowledged document is searchable after restart, none is half-indexed."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from appliance.retrieve import PartitionFilter
from appliance.store import Store
from appliance.wiring import open_services
from support import make_settings, run

HERE = Path(__file__).resolve().parents[1]  # tests/, where ingest_driver.py is


def ingest_until_killed(data_dir: Path, models_dir: Path, start: int, acks_before_kill: int, extra_delay: float):
    env = {**os.environ, "PYTHONPATH": f"{HERE}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.Popen([sys.executable, str(HERE / "ingest_driver.py"), str(data_dir), str(models_dir),
                             str(start), "120"], stdout=subprocess.PIPE, text=True, env=env)
    acked: list[str] = []
    try:
        for line in proc.stdout:
            if line.startswith("ACK "):
                acked.extend(line.split()[1:])
                if len(acked) >= 4 * acks_before_kill:
                    break
            assert not line.startswith("DONE"), "the ingest finished before it could be killed"
        time.sleep(extra_delay)  # land somewhere inside the next commit or index build
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    return acked


def test_kill_9_mid_ingest_loses_no_acknowledged_document(tmp_path, models_dir):
    acked: list[str] = []
    for round_no, (acks, delay) in enumerate([(1, 0.0), (3, 0.7), (6, 1.9)]):
        acked += ingest_until_killed(tmp_path, models_dir, start=round_no * 200, acks_before_kill=acks,
                                     extra_delay=delay)

    settings = make_settings(tmp_path, models_dir)
    store = Store(settings.store_path)
    partition = store.get_partition("crash", "p")
    stored_ids = store.chunk_ids(partition.id)
    by_doc: dict[str, set[int]] = {}
    for chunk in store.chunks(stored_ids):
        by_doc.setdefault(chunk.doc_key, set()).add(chunk.id)
    store.close()
    assert set(acked) <= set(by_doc)  # acknowledged means durable

    async def reopen():
        async with open_services(settings) as services:
            snapshot = services.library.snapshot(partition.tenant, partition.name)
            indexed: dict[str, set[int]] = {}
            for row in range(snapshot.size):
                info = snapshot.chunk(row)
                indexed.setdefault(info.doc_key, set()).add(info.chunk_id)
            found = {}
            for key in acked[::7]:
                title = next(c for c in [snapshot.chunk(r) for r in range(snapshot.size)] if c.doc_key == key).title
                result = await services.retriever.search(title, PartitionFilter("crash"), 10)
                found[key] = [h.chunk.doc_key for h in result.hits]
        return snapshot, indexed, found

    snapshot, indexed, found = run(reopen())
    assert snapshot.store_version == partition.version
    assert np.array_equal(np.asarray(snapshot.chunk_ids), np.asarray(sorted(stored_ids)))
    assert indexed == by_doc  # every document whole: all of its chunks or none
    for key, hits in found.items():
        assert key in hits, f"acknowledged document {key} is not searchable by its title"
