from pathlib import Path

import pytest

from appliance.config import ConfigError, load_settings


def test_defaults_are_valid():
    s = load_settings(env={})
    assert s.server.host == "127.0.0.1" and s.index.dtype == "f16" and s.retrieve.rrf_k == 60


def test_toml_then_environment_override(tmp_path: Path):
    path = tmp_path / "appliance.toml"
    path.write_text('data_dir = "/srv/a"\n[server]\nport = 9000\n[retrieve]\nrrf_k = 30\n')
    s = load_settings(path, env={"APPLIANCE_SERVER_PORT": "9100", "APPLIANCE_RETRIEVE_LATE_INTERACTION": "yes"})
    assert s.data_dir == Path("/srv/a")
    assert s.server.port == 9100  # environment wins over the file
    assert s.retrieve.rrf_k == 30
    assert s.retrieve.late_interaction is True


def test_every_wrong_value_is_reported_at_once(tmp_path: Path):
    path = tmp_path / "bad.toml"
    path.write_text('[server]\nport = "eighty"\n[index]\ndtype = "f8"\nbogus = 1\n')
    with pytest.raises(ConfigError) as err:
        load_settings(path, env={"APPLIANCE_ENCODER_THREADS": "0"})
    message = str(err.value)
    assert "server.port: expected an integer" in message
    assert "index.bogus: unknown setting" in message
    # type errors stop validation of values; a clean file then reports range and choice errors
    path.write_text('[index]\ndtype = "f8"\n')
    with pytest.raises(ConfigError) as err:
        load_settings(path, env={"APPLIANCE_ENCODER_THREADS": "0", "APPLIANCE_RETRIEVE_DEFAULT_K": "500"})
    message = str(err.value)
    assert "index.dtype: 'f8' is not one of" in message
    assert "encoder.threads: must be greater than 0" in message
    assert "retrieve.default_k: must not exceed retrieve.max_k" in message


def test_missing_or_broken_file_is_a_clear_error(tmp_path: Path):
    with pytest.raises(ConfigError, match="not found"):
        load_settings(tmp_path / "nope.toml", env={})
    broken = tmp_path / "broken.toml"
    broken.write_text("[server\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_settings(broken, env={})


def test_bool_and_number_coercion_rejects_nonsense():
    with pytest.raises(ConfigError, match="expected true or false"):
        load_settings(env={"APPLIANCE_DEMO_CORPUS": "maybe"})
    with pytest.raises(ConfigError, match="expected a number"):
        load_settings(env={"APPLIANCE_ENCODER_BATCH_WINDOW_MS": "soon"})


def test_engine_sections_keep_their_own_defaults_under_overrides(tmp_path: Path):
    path = tmp_path / "engines.toml"
    path.write_text('[large]\nmodel = "/srv/models/qwen-7b-awq"\nquantization = "awq"\n')
    s = load_settings(path, env={"APPLIANCE_SMALL_KV_CACHE_GIB": "1.5"})
    # one engine by default, on both cores; the small one, once turned on, takes core 0
    assert s.small.cpu_cores == "0" and s.large.cpu_cores == "0-1" and not s.small.enabled
    assert s.engine_roles() == ("large",)
    assert s.small.max_model_len < s.large.max_model_len
    assert s.small.kv_cache_gib == 1.5 and s.small.model == "qwen2.5-1.5b"
    assert s.large.model == "/srv/models/qwen-7b-awq" and s.large.quantization == "awq"
    assert s.large.max_num_seqs == 16  # a field not named keeps the large engine's default, not the class default


def test_gpu_shares_and_engine_limits_are_checked():
    with pytest.raises(ConfigError) as err:
        load_settings(env={"APPLIANCE_GENERATE_DEVICE": "gpu", "APPLIANCE_SMALL_GPU_MEMORY_UTILIZATION": "0.5",
                           "APPLIANCE_LARGE_GPU_MEMORY_UTILIZATION": "0.5", "APPLIANCE_LARGE_CPU_CORES": "one",
                           "APPLIANCE_SMALL_MAX_TOKENS": "4096", "APPLIANCE_ROUTER_MAX_WORDS_SMALL": "0"})
    message = str(err.value)
    assert "the two shares sum to 1.00; must be below 0.95" in message
    assert "large.cpu_cores: 'one' is not a core list" in message
    assert "small.max_tokens: must be below small.max_model_len" in message
    assert "router.max_words_small: must be greater than 0" in message
    ok = load_settings(env={"APPLIANCE_GENERATE_DEVICE": "gpu", "APPLIANCE_SMALL_GPU_MEMORY_UTILIZATION": "0.3",
                            "APPLIANCE_LARGE_GPU_MEMORY_UTILIZATION": "0.6"})
    assert ok.small.gpu_memory_utilization + ok.large.gpu_memory_utilization < 0.95


def test_quotas_and_the_chunk_character_bound_are_checked():
    with pytest.raises(ConfigError) as err:
        load_settings(env={"APPLIANCE_QUOTA_MAX_DOCUMENTS": "-1", "APPLIANCE_CHUNKING_MAX_CHARS": "0"})
    message = str(err.value)
    assert "quota.max_documents: must be 0 (unlimited) or more" in message
    assert "chunking.max_chars: must be greater than 0" in message
    s = load_settings(env={"APPLIANCE_QUOTA_MAX_TEXT_BYTES": "1000000"})
    assert s.quota.max_text_bytes == 1_000_000 and s.quota.max_documents == 0 and s.chunking.max_chars == 2000


def test_allowed_hosts_and_body_limits(tmp_path: Path):
    path = tmp_path / "hosts.toml"
    path.write_text('[server]\nallowed_hosts = ["appliance.internal", "10.0.0.5", "fd00::5"]\n')
    assert load_settings(path, env={}).server.allowed_hosts == ("appliance.internal", "10.0.0.5", "fd00::5")
    from_env = load_settings(env={"APPLIANCE_SERVER_ALLOWED_HOSTS": " a.example, b.example ,"})
    assert from_env.server.allowed_hosts == ("a.example", "b.example")
    with pytest.raises(ConfigError) as err:
        load_settings(env={"APPLIANCE_SERVER_ALLOWED_HOSTS": "http://a.example,b.example:8080",
                           "APPLIANCE_SERVER_MAX_JSON_VALUES": "0", "APPLIANCE_SERVER_MAX_QUERY_BODY_BYTES": "-1"})
    message = str(err.value)
    assert "server.allowed_hosts: 'http://a.example' is not a host name" in message
    assert "server.allowed_hosts: 'b.example:8080' is not a host name" in message
    assert "server.max_json_values: must be greater than 0" in message
    assert "server.max_query_body_bytes: must be greater than 0" in message


def test_token_codec_settings_are_checked():
    with pytest.raises(ConfigError) as err:
        load_settings(env={"APPLIANCE_INDEX_TOKEN_CODEC": "pq", "APPLIANCE_INDEX_TOKEN_BITS": "3",
                           "APPLIANCE_INDEX_CODEBOOK_CENTROIDS": "0", "APPLIANCE_INDEX_WARM_MAX_MIB": "-1"})
    message = str(err.value)
    assert "index.token_codec: 'pq' is not one of ['int8', 'residual']" in message
    assert "index.token_bits: 3 is not one of [1, 2, 4, 8]" in message
    assert "index.codebook_centroids: must be greater than 0" in message
    assert "index.warm_max_mib: must be 0" in message
    with pytest.raises(ConfigError) as err:
        load_settings(env={"APPLIANCE_INDEX_CODEBOOK_CENTROIDS": "70000"})
    assert "at most 65536" in str(err.value) and "at least 16 tokens per centroid" in str(err.value)
    s = load_settings(env={"APPLIANCE_INDEX_TOKEN_BITS": "2", "APPLIANCE_INDEX_WARM_MAX_MIB": "0"})
    assert s.index.token_bits == 2 and s.index.warm_max_mib == 0 and s.index.token_codec == "residual"


def test_encoder_graph_is_auto_or_one_that_exists():
    assert load_settings(env={}).encoder.graph == "auto"
    assert load_settings(env={"APPLIANCE_ENCODER_GRAPH": "fp32"}).encoder.graph == "fp32"
    with pytest.raises(ConfigError, match=r"encoder.graph: 'fp16' is not one of \['auto', 'fp32', 'int8'\]"):
        load_settings(env={"APPLIANCE_ENCODER_GRAPH": "fp16"})


def _declared_settings():
    """(name, field, type, default value) of every setting, a section's under `section.name`; the engine sections'
    values are their own defaults (small and large differ)."""
    from dataclasses import fields, is_dataclass
    from typing import get_type_hints

    from appliance.config import Settings

    def walk(obj, prefix):
        hints = get_type_hints(type(obj))
        for f in fields(obj):
            value = getattr(obj, f.name)
            name = f"{prefix}{f.name}"
            if is_dataclass(value):
                yield from walk(value, name + ".")
            elif name != "cluster.members":  # read from the boxes file, not a setting of its own
                yield name, f, hints[f.name], value
    return list(walk(Settings(), ""))


def _env_name(name: str) -> str:
    return "APPLIANCE_" + name.replace(".", "_").upper()


def test_every_setting_is_declared_with_why_and_every_number_with_its_bounds():
    from appliance.config.rules import rule_of
    settings = _declared_settings()
    assert len(settings) > 140
    undeclared, no_why, unbounded = [], [], []
    for name, f, kind, _ in settings:
        rule = rule_of(f)
        if rule is None:
            undeclared.append(name)
            continue
        if not rule.why.strip():
            no_why.append(name)
        if kind in (int, float) and not (rule.bounded or rule.choices or rule.unbounded):
            unbounded.append(name)
    assert not undeclared, f"declare these with config.rules.setting: {undeclared}"
    assert not no_why, f"say why these exist (why=...): {no_why}"
    assert not unbounded, f"give these bounds, or unbounded=True where any number goes: {unbounded}"
    # the numbers that take any value on purpose: a new one has to be added here knowingly
    assert sorted(name for name, f, _, _ in settings if rule_of(f).unbounded) == [
        "cluster.drain_grace_s", "generate.min_relevance", "generate.restart_delay_s", "router.bias"]


def test_a_refused_number_is_reported_with_the_setting_its_bounds_and_the_value():
    from appliance.config.rules import rule_of
    checked = 0
    for name, f, kind, _ in _declared_settings():
        rule = rule_of(f)
        if kind not in (int, float) or not rule.bounded:
            continue
        outside = [bound for bound in (rule.above, rule.below) if bound is not None]
        outside += [rule.minimum - 1] if rule.minimum is not None else []
        outside += [rule.maximum + 1] if rule.maximum is not None else []
        for value in outside:
            with pytest.raises(ConfigError) as err:
                load_settings(env={_env_name(name): str(kind(value))})
            assert f"  {name}: must be {rule.bounds()}, got {kind(value)}" in str(err.value).splitlines()
            checked += 1
    assert checked > 100
    with pytest.raises(ConfigError) as err:
        load_settings(env={"APPLIANCE_SERVER_PORT": "70000", "APPLIANCE_RETRIEVE_LATE_WEIGHT_ZH": "1.5"})
    assert "server.port: must be greater than 0 and at most 65535, got 70000" in str(err.value)
    assert "retrieve.late_weight_zh: must be from 0 (off) to 1 (MaxSim order alone), got 1.5" in str(err.value)


def test_every_choice_setting_defaults_to_one_of_its_choices():
    from appliance.config.rules import rule_of
    with_choices = [(name, f, value) for name, f, _, value in _declared_settings() if rule_of(f).choices]
    assert len(with_choices) >= 20
    for name, f, value in with_choices:
        assert f.default in rule_of(f).choices and value in rule_of(f).choices, name
    with pytest.raises(ConfigError, match=r"conversation.rewrite_engine: 'medium' is not one of \['large', 'small'\]"):
        load_settings(env={"APPLIANCE_CONVERSATION_REWRITE_ENGINE": "medium"})


def test_sections_stay_slotted_and_frozen():
    import dataclasses

    from appliance.config import Settings
    settings = Settings()
    for section in [settings] + [getattr(settings, f.name) for f in dataclasses.fields(settings)
                                 if dataclasses.is_dataclass(getattr(settings, f.name))]:
        assert hasattr(type(section), "__slots__"), type(section).__name__
        name = dataclasses.fields(section)[0].name
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(section, name, getattr(section, name))


def test_the_settings_reference_is_written_from_the_declarations():
    from appliance.config.reference import reference
    docs = Path(__file__).resolve().parents[2] / "docs" / "settings.md"
    assert docs.read_text(encoding="utf-8") == reference(), \
        "docs/settings.md is out of date: python -m appliance.config.reference > docs/settings.md"
