"""Tenants do not share vLLM's prefix cache, and only admins see its figures (real engines: `llm_served`)."""
import stat
import uuid

from appliance.generate.salt import KEY_FILE, CacheSalts

PUMP = ("The XK-4471 pump housing is cast from grey iron and painted signal blue. Its impeller has seven curved "
        "vanes and turns at 2900 revolutions per minute. The seals are replaced every 4000 hours of running, and "
        "the bearings are greased every 500 hours with a lithium grease. Before any service the pump is isolated "
        "by closing both valves and the motor is locked out at its breaker. ") * 3
PREFIX_FIELDS = {"prefix_cache_queries", "prefix_cache_hits", "prefix_cache_hit_rate"}


def _ask(c, tenant: str, question: str) -> dict:
    reply = c.post("/v1/ask", json={"tenant": tenant, "question": question, "model": "small", "max_tokens": 2,
                                    "partitions": ["pumps"]})
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["route"]["engine"] == "small", body["route"]  # generated, not served from a cache
    return body["usage"]


def test_tenants_prompts_share_the_prefix_cache_only_within_the_tenant(llm_served):
    """Two tenants with the same document send vLLM the same prompt for the same question: without a salt the
    second would be served from the first's KV blocks (what a side channel measures). With each tenant's salt it
    is computed afresh, while a tenant's next question still reuses its own system prefix and passages."""
    live, _ = llm_served
    first, second = (f"salt-{n}-{uuid.uuid4().hex[:8]}" for n in "ab")  # never seen by the engines before
    question = "How often are the seals of the XK-4471 replaced?"
    with live.client(live.keys["admin"]) as c:  # an admin key may name any tenant
        for tenant in (first, second):
            docs = [{"id": "xk-4471", "title": "XK-4471 pump", "text": PUMP}]
            reply = c.post("/v1/documents", json={"tenant": tenant, "partition": "pumps", "documents": docs})
            assert reply.status_code == 200, reply.text
        _ask(c, first, question)
        assert _ask(c, second, question)["cached_prompt_tokens"] == 0, "another tenant's blocks were reused"
        again = _ask(c, second, "Which grease do the bearings of the XK-4471 get?")
    assert again["cached_prompt_tokens"] > 0, again  # its own earlier prompt's prefix
    engines = live.app.state.services.engines
    salts = {engines.salt_for(t) for t in (first, second, "default")}
    assert len(salts) == 3 and all(len(s) == 64 and first not in s for s in salts)
    key_file = live.settings.data_dir / KEY_FILE
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600  # whoever reads it could compute every tenant's salt


def test_only_admins_see_prefix_cache_figures_and_no_one_sees_model_paths(llm_served):
    """Hit counters move when any tenant repeats a prompt, so a tenant's key sees none (GET /v1/engines,
    /metrics); models are named, not located (absolute paths map the box's folders)."""
    live, _ = llm_served
    with live.client() as tenant, live.client(live.keys["admin"]) as admin:
        mine, boxes = tenant.get("/v1/engines").json()["engines"], admin.get("/v1/engines").json()["engines"]
        tenant_metrics, admin_metrics = tenant.get("/metrics").text, admin.get("/metrics").text
        models = tenant.get("/v1/models").json()["data"]
    assert mine and all(not PREFIX_FIELDS & set(info) for info in mine.values()), mine
    assert all(PREFIX_FIELDS <= set(info) for info in boxes.values()), boxes
    assert "prefix_cache" not in tenant_metrics and "vllm:num_requests_running" in tenant_metrics
    assert "vllm:prefix_cache_hits_total" in admin_metrics and "appliance_prefix_cache_hit_ratio" in admin_metrics
    for info in (*mine.values(), *boxes.values()):
        assert "/" not in info["model"], info["model"]
    roots = {m["id"]: m["root"] for m in models if m["id"] != "auto"}
    assert roots["small"] == "tiny-llm" and roots["large"] and "/" not in roots["large"], roots
    for text in (tenant_metrics, admin_metrics, str(models), str(boxes)):
        assert str(live.settings.models_dir) not in text


def test_a_salt_is_a_keyed_hash_of_the_tenant(tmp_path):
    """Made on first use and kept: the same tenant keeps its salt across boots; another box's key, another salt."""
    first = CacheSalts.load(tmp_path)
    assert CacheSalts.load(tmp_path).for_tenant("acme") == first.for_tenant("acme")
    assert CacheSalts.load(tmp_path / "other").for_tenant("acme") != first.for_tenant("acme")
    assert first.for_tenant(None) is None
