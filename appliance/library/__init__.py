"""The write path and the library service: documents in the store and each partition's index kept in step with it
(`service.py`: `Library`, the owner of the store above the stages; `records.py`: what it answers and refuses),
documents chunked and indexed
(`ingest.py`), tenant quotas checked before a write (`quotas.py`), files in through the parser workers with their
pages and sections (`files.py`: `FileIngester`, re-parsing kept files), and re-indexes asked of a running server,
queued with tenants taking turns (`reindexing.py`). The other services reach stored documents through the
`Library`'s methods, never its store (a listed document, `FileDocument`, is part of this surface; so are the
journal's records, which replication carries between boxes: `journal.py`, `Library.journal`).
"""
from ..store import FileDocument, JournalChange, NewDocument, Place, SourceFile
from .files import FileIngester, FileInput, FilesResult
from .ingest import DocumentInput
from .journal import ReplicationJournal
from .quotas import QuotaExceeded
from .records import IngestResult, KindConflict, LanguageConflict, PartitionInfo
from .reindexing import JobState, Reindexer, ReindexerClosed, ReindexJob, ReindexPending, ReindexQueueFull
from .service import Library, check_reindex

__all__ = ["DocumentInput", "FileDocument", "FileIngester", "FileInput", "FilesResult", "IngestResult", "JobState",
           "JournalChange", "KindConflict", "LanguageConflict", "Library", "NewDocument", "PartitionInfo", "Place",
           "QuotaExceeded", "ReindexJob", "Reindexer", "ReindexerClosed", "ReindexPending", "ReindexQueueFull",
           "ReplicationJournal", "SourceFile", "check_reindex"]
