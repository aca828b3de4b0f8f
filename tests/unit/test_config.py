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
