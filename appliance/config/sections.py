"""The settings' sections and their defaults: one frozen dataclass per TOML table (in `serving.py`, `search.py`,
`answering.py`, a site's in `cluster.py`), `Settings` holding them. Each setting is declared with `rules.setting`:
its default, the values it accepts and why."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .answering import (DEFAULT_MODEL, ENGINE_ROLES, CacheSettings, ConversationSettings, EngineSettings,
                      GenerateSettings, RouterSettings, large_engine, small_engine)
from .cluster import ClusterSettings
from .rules import setting
from .search import (MAX_FUSION_WEIGHT, ChunkSettings, EncoderSettings, IndexSettings, ParseSettings,
                     RetrieveSettings)
from .serving import AdmissionSettings, QuotaSettings, ServerSettings, TelemetrySettings

__all__ = ["DEFAULT_MODEL", "ENGINE_ROLES", "MAX_FUSION_WEIGHT", "NAME_PATTERN", "AdmissionSettings", "CacheSettings",
           "ChunkSettings", "ClusterSettings", "ConversationSettings", "EncoderSettings", "EngineSettings",
           "GenerateSettings", "IndexSettings", "ParseSettings", "QuotaSettings", "RetrieveSettings", "RouterSettings",
           "ServerSettings", "Settings", "TelemetrySettings"]

# The one rule for a tenant's or a partition's name: the API's, the keys file's and the CLI's.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$"


@dataclass(slots=True, frozen=True)
class Settings:
    data_dir: Path = setting(Path("state"), why="the box's data: store, indexes, kept files, caches, uploads")
    models_dir: Path = setting(Path("models"), why="built models (models_dir/build/<name>)")
    demo_corpus: bool = setting(True, why="a box on its own with no partitions yet loads the demo documents at boot")
    log_level: str = setting("info", choices=("debug", "info", "warning", "error"), why="the lowest level logged")
    server: ServerSettings = field(default_factory=ServerSettings)
    encoder: EncoderSettings = field(default_factory=EncoderSettings)
    index: IndexSettings = field(default_factory=IndexSettings)
    chunking: ChunkSettings = field(default_factory=ChunkSettings)
    parse: ParseSettings = field(default_factory=ParseSettings)
    retrieve: RetrieveSettings = field(default_factory=RetrieveSettings)
    generate: GenerateSettings = field(default_factory=GenerateSettings)
    small: EngineSettings = field(default_factory=small_engine)
    large: EngineSettings = field(default_factory=large_engine)
    router: RouterSettings = field(default_factory=RouterSettings)
    conversation: ConversationSettings = field(default_factory=ConversationSettings)
    cache: CacheSettings = field(default_factory=CacheSettings)
    admission: AdmissionSettings = field(default_factory=AdmissionSettings)
    quota: QuotaSettings = field(default_factory=QuotaSettings)
    telemetry: TelemetrySettings = field(default_factory=TelemetrySettings)
    cluster: ClusterSettings = field(default_factory=ClusterSettings)

    def engines(self) -> dict[str, EngineSettings]:
        """The enabled engines by role, in fallback order. The answer path knows roles only through this mapping;
        a role is a settings section (`[small]`, `[large]`)."""
        return {role: spec for role in ENGINE_ROLES if (spec := getattr(self, role)).enabled}

    def engine_roles(self) -> tuple[str, ...]:
        return tuple(self.engines())

    @property
    def cache_dir(self) -> Path:
        return self.data_dir / "cache"

    @property
    def store_path(self) -> Path:
        return self.data_dir / "store.sqlite3"

    @property
    def spool_dir(self) -> Path:  # uploads in progress (emptied at boot)
        return self.data_dir / "spool"

    @property
    def files_dir(self) -> Path:
        """Original bytes of ingested files, content-addressed (so a newer parser can read them again)."""
        return self.data_dir / "files"

    @property
    def index_dir(self) -> Path:
        return self.data_dir / "indexes"
