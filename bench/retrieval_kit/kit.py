"""What the retrieval benchmark opens: the product's services over a data folder, and, for the search-only
figures, the same stage classes (encoder + micro-batcher, BM25 tokenizer, hybrid searcher) built from the same
settings, so that a search without its encoder call runs exactly the product's code."""
from __future__ import annotations

import contextlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from appliance.config import Settings
from appliance.encode import MicroBatcher, load_encoder
from appliance.paths import model_folder
from appliance.retrieve import HybridSearcher
from appliance.text import BM25Tokenizer
from appliance.wiring import Services, open_services


@dataclass(slots=True)
class BenchApp:
    settings: Settings
    services: Services
    _stack: contextlib.AsyncExitStack

    @classmethod
    async def open(cls, settings: Settings) -> "BenchApp":
        stack = contextlib.AsyncExitStack()
        services = await stack.enter_async_context(open_services(settings, warm_up=False, generation=False))
        return cls(settings, services, stack)

    async def search(self, *args, **kwargs):
        return await self.services.retriever.search(*args, **kwargs)

    async def stop(self) -> None:
        await self._stack.aclose()


@dataclass(slots=True)
class StageKit:
    """Stage objects for search-only timing: a query encoder, the BM25 tokenizer and a hybrid searcher."""
    batcher: MicroBatcher
    tokenizer: BM25Tokenizer
    searcher: HybridSearcher
    _executor: ThreadPoolExecutor

    @classmethod
    async def open(cls, settings: Settings) -> "StageKit":
        e = settings.encoder
        encoder = load_encoder(e.model, model_folder(settings.models_dir, e.model), e.threads, e.max_length, e.graph)
        batcher = MicroBatcher(encoder, e.batch_window_ms, e.max_batch, e.queue_size)
        await batcher.start()
        executor = ThreadPoolExecutor(settings.retrieve.search_threads, thread_name_prefix="search")
        return cls(batcher, BM25Tokenizer(), HybridSearcher(settings.retrieve, executor), executor)

    async def stop(self) -> None:
        await self.batcher.stop()
        self._executor.shutdown(wait=True)
