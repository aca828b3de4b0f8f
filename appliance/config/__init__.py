"""One typed settings object, read once at boot from a TOML file plus APPLIANCE_* environment variables and
validated there (`load.py`). Each setting is declared once, with its default, the values it accepts and why
(`rules.setting`), in its section: `serving.py`, `search.py`, `answering.py`, a site's in `cluster.py`; `sections.py`
holds them all in `Settings`. Stages receive the sections they need, never the environment."""
from .cluster import ClusterBox, ClusterSettings
from .load import ENV_PREFIX, ConfigError, load_boxes, load_settings
from .sections import (ENGINE_ROLES, MAX_FUSION_WEIGHT, NAME_PATTERN, AdmissionSettings, CacheSettings,
                       ChunkSettings, ConversationSettings, EncoderSettings, EngineSettings, GenerateSettings,
                       IndexSettings, ParseSettings, QuotaSettings, RetrieveSettings, RouterSettings, ServerSettings,
                       Settings, TelemetrySettings)

__all__ = ["AdmissionSettings", "CacheSettings", "ChunkSettings", "ClusterBox", "ClusterSettings", "ConfigError",
           "ConversationSettings", "ENGINE_ROLES", "ENV_PREFIX", "MAX_FUSION_WEIGHT", "NAME_PATTERN",
           "EncoderSettings", "EngineSettings", "GenerateSettings", "IndexSettings", "ParseSettings",
           "QuotaSettings", "RetrieveSettings", "RouterSettings", "ServerSettings", "Settings", "TelemetrySettings",
           "load_boxes", "load_settings"]
