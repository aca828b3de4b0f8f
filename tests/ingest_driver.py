"""Run as a subprocess by test_crash.py: ingests SciFact documents in small batches and prints an ACK line after
each batch is acknowledged (stored), while index builds run in the background. The test kills it with SIGKILL."""
import asyncio
import sys
from pathlib import Path

from appliance.evaluate import beir_documents, load_beir
from appliance.wiring import open_services
from support import SCIFACT, make_settings


async def main(data_dir: str, models_dir: str, start: int, count: int) -> None:
    settings = make_settings(Path(data_dir), Path(models_dir))
    async with open_services(settings, warm_up=False, generation=False) as services:
        docs = beir_documents(load_beir(SCIFACT).corpus[start:start + count])
        print("READY", flush=True)
        for i in range(0, len(docs), 4):
            batch = docs[i:i + 4]
            await services.library.ingest("crash", "p", batch, wait=False)  # acknowledged = committed
            print("ACK " + " ".join(d.id for d in batch), flush=True)
        await services.library.ingest("crash", "p", [], wait=True)
        print("DONE", flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
