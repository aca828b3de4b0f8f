"""The Kubernetes example (packaging/cluster/kubernetes/), checked offline, never on a cluster: every manifest against
the Kubernetes JSON schemas that kubernetes-validate ships (strict: an unknown or misspelled field fails), then
what a schema cannot know: the hardening of every container, the probes, the names that must agree from one file
to another, and that the server accepts the settings the manifests give it."""
from __future__ import annotations

import copy
import dataclasses
import re
import tomllib
import typing
from pathlib import Path

import pytest

kv = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate is not installed (it is in the dev extra)")

import yaml  # noqa: E402  (PyYAML comes with kubernetes-validate)
from appliance.config import ENV_PREFIX, Settings, load_settings  # noqa: E402
from appliance.serve.http.origin import HostPolicy, host_name  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[2] / "packaging" / "cluster" / "kubernetes"
KUBERNETES = "1.37.0"  # pinned: the newest schemas kubernetes-validate 1.37 ships (validate() says which it used)
FILES = {"namespace.yaml", "configmap.yaml", "secret.example.yaml", "statefulset.yaml", "service.yaml",
         "haproxy.yaml", "hpa.yaml", "networkpolicy.yaml", "pdb.yaml"}
HARDENED = {"runAsNonRoot": True, "runAsUser": 10001, "readOnlyRootFilesystem": True,
            "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"}}


def _documents() -> list[tuple[str, dict]]:
    return [(path.name, doc) for path in sorted(EXAMPLE.glob("*.yaml")) if path.name != "kustomization.yaml"
            for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc]


DOCUMENTS = _documents()


def _one(kind: str, name: str | None = None) -> dict:
    found = [d for _, d in DOCUMENTS if d["kind"] == kind and name in (None, d["metadata"]["name"])]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def _containers(workload: dict) -> list[dict]:
    pod = workload["spec"]["template"]["spec"]
    return pod.get("initContainers", []) + pod["containers"]


def _box() -> dict:
    return next(c for c in _one("StatefulSet")["spec"]["template"]["spec"]["containers"] if c["name"] == "appliance")


def _env(container: dict) -> dict[str, dict]:
    return {e["name"]: e for e in container.get("env", [])}


def _boxes_toml() -> list[dict]:
    return tomllib.loads(_one("ConfigMap", "appliance-cluster")["data"]["boxes.toml"])["box"]


def test_the_example_has_its_files():
    assert {p.name for p in EXAMPLE.glob("*.yaml")} == FILES | {"kustomization.yaml"}
    assert (EXAMPLE / "README.md").is_file()
    resources = yaml.safe_load((EXAMPLE / "kustomization.yaml").read_text(encoding="utf-8"))["resources"]
    # the example Secret's placeholders must never be applied with the rest
    assert set(resources) == FILES - {"secret.example.yaml"}


@pytest.mark.parametrize("document", [d for _, d in DOCUMENTS],
                         ids=[f"{f}:{d['kind']}/{d['metadata']['name']}" for f, d in DOCUMENTS])
def test_every_manifest_matches_the_kubernetes_schema(document):
    assert document["metadata"].get("namespace", "rag") == "rag"
    # the version validated against is returned: the pinned one, not an older fallback
    assert kv.validate(document, KUBERNETES, strict=True) == "1.37"


@pytest.mark.parametrize("spoil", ["serviceNmae", "readinesProbe", "paht", "replicas"])
def test_the_validator_rejects_a_spoiled_manifest(spoil):
    """Proof that the check above can fail: a misspelled field at any depth, or a wrong type."""
    statefulset = copy.deepcopy(_one("StatefulSet"))
    container = statefulset["spec"]["template"]["spec"]["containers"][0]
    if spoil == "serviceNmae":
        statefulset["spec"]["serviceNmae"] = statefulset["spec"].pop("serviceName")
    elif spoil == "readinesProbe":
        container["readinesProbe"] = container.pop("readinessProbe")
    elif spoil == "paht":
        container["readinessProbe"]["httpGet"]["paht"] = container["readinessProbe"]["httpGet"].pop("path")
    else:
        statefulset["spec"]["replicas"] = "four"
    with pytest.raises(kv.ValidationError):
        kv.validate(statefulset, KUBERNETES, strict=True)


@pytest.mark.parametrize("kind", ["StatefulSet", "Deployment"])
def test_every_container_is_hardened(kind):
    workload = _one(kind)
    pod = workload["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["automountServiceAccountToken"] is False
    for container in _containers(workload):
        context = container.get("securityContext", {})
        wrong = {k: context.get(k) for k, v in HARDENED.items() if context.get(k) != v}
        assert not wrong, f"{kind} container {container['name']}: securityContext {wrong}"
        assert {"cpu", "memory"} <= set(container["resources"]["requests"]) <= set(container["resources"]["limits"])


def test_the_boxes_have_a_headless_service_and_their_own_volumes():
    statefulset, service = _one("StatefulSet"), _one("Service", _one("StatefulSet")["spec"]["serviceName"])
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True  # peers catching up are reached before ready
    labels = statefulset["spec"]["template"]["metadata"]["labels"]
    assert statefulset["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert service["spec"]["selector"].items() <= labels.items()
    claims = [t["metadata"]["name"] for t in statefulset["spec"]["volumeClaimTemplates"]]
    data_dir = _env(_box())["APPLIANCE_DATA_DIR"]["value"]
    assert any(m["name"] in claims and m["mountPath"] == data_dir for m in _box()["volumeMounts"])


def test_haproxy_reaches_the_balancer_service_and_its_configuration():
    deployment, service = _one("Deployment", "haproxy"), _one("Service", "rag-appliance")
    assert service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["selector"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    (haproxy,) = deployment["spec"]["template"]["spec"]["containers"]
    config = haproxy["command"][haproxy["command"].index("-f") + 1]
    mount = next(m for m in haproxy["volumeMounts"] if config.startswith(m["mountPath"] + "/"))
    volume = next(v for v in deployment["spec"]["template"]["spec"]["volumes"] if v["name"] == mount["name"])
    text = _one("ConfigMap", volume["configMap"]["name"])["data"][Path(config).name]
    assert "req.hdr(x-tenant)" in text and "crc32" in text
    assert "option httpchk" in text and "uri /readyz" in text
    urls = {b["url"].removeprefix("http://") for b in _boxes_toml()}
    servers = re.findall(r"^\s*server \S+ (\S+)", text, re.M)
    assert servers and set(servers) <= urls, "HAProxy's servers must be boxes of boxes.toml"


def test_probes():
    box, policy = _box(), HostPolicy(_server_settings())
    paths = {probe: box[probe]["httpGet"]["path"] for probe in ("startupProbe", "livenessProbe", "readinessProbe")}
    assert paths == {"startupProbe": "/healthz", "livenessProbe": "/healthz", "readinessProbe": "/readyz"}
    for probe in paths:
        get = box[probe]["httpGet"]
        assert get["port"] in ("http", 8080)
        hosts = [h["value"] for h in get.get("httpHeaders", []) if h["name"].lower() == "host"]
        # without it the kubelet sends the pod's IP as Host, which the server answers with 403
        assert hosts and policy.allows(host_name(hosts[0])), f"{probe}: Host header the server accepts"
    assert box["startupProbe"]["periodSeconds"] * box["startupProbe"]["failureThreshold"] >= 180


def test_clients_host_names_are_allowed():
    policy = HostPolicy(_server_settings())
    service = _one("Service", "rag-appliance")["metadata"]
    assert policy.allows(f"{service['name']}.{service['namespace']}.svc.cluster.local")
    assert policy.allows(service["name"])


def test_cluster_settings_come_from_the_pod_and_its_files():
    env, statefulset = _env(_box()), _one("StatefulSet")
    assert env["APPLIANCE_CLUSTER_SELF"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    folder = str(Path(env["APPLIANCE_CLUSTER_BOXES"]["value"]).parent)
    assert str(Path(env["APPLIANCE_CLUSTER_SECRET_FILE"]["value"]).parent) == folder
    assert any(m["mountPath"] == folder for m in _box()["volumeMounts"])
    # the server refuses a cluster secret its group may read: the init container copies it there as mode 0400
    (init,) = statefulset["spec"]["template"]["spec"]["initContainers"]
    command = init["command"]
    assert command[:2] == ["install", "-m"] and int(command[2], 8) & 0o077 == 0
    assert command[command.index("-t") + 1] == folder
    copied = {Path(c).name for c in command[command.index("-t") + 2:]}
    assert copied == {Path(env[n]["value"]).name for n in ("APPLIANCE_CLUSTER_BOXES", "APPLIANCE_CLUSTER_SECRET_FILE")}
    keys = next(v for v in statefulset["spec"]["template"]["spec"]["volumes"] if v["name"] == "keys")
    assert keys["secret"]["defaultMode"] & 0o026 == 0  # the server refuses a keys file others may read


def test_the_boxes_file_lists_every_pod_the_hpa_may_run():
    statefulset, service, hpa = _one("StatefulSet"), _one("Service", "appliance"), _one("HorizontalPodAutoscaler")
    name, namespace = statefulset["metadata"]["name"], statefulset["metadata"]["namespace"]
    port = int(_env(_box())["APPLIANCE_SERVER_PORT"]["value"])
    spec = hpa["spec"]
    expected = [{"name": f"{name}-{i}", "url": f"http://{name}-{i}.{service['metadata']['name']}.{namespace}"
                 f".svc.cluster.local:{port}"} for i in range(spec["maxReplicas"])]
    assert _boxes_toml() == expected
    assert 2 <= spec["minReplicas"] <= statefulset["spec"]["replicas"] <= spec["maxReplicas"]


def test_the_hpa_scales_the_boxes_on_requests_in_progress():
    spec = _one("HorizontalPodAutoscaler")["spec"]
    assert spec["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "appliance"}
    (metric,) = spec["metrics"]
    assert metric["type"] == "Pods" and metric["pods"]["metric"]["name"] == "appliance_in_flight_requests"
    assert metric["pods"]["target"]["type"] == "AverageValue"
    source = (EXAMPLE.parent.parent.parent / "appliance" / "serve" / "app.py").read_text(encoding="utf-8")
    assert '"appliance_in_flight_requests"' in source, "the metric the HPA reads is still exported"


def test_network_policy_and_disruption_budget_select_the_boxes():
    labels = _one("StatefulSet")["spec"]["template"]["metadata"]["labels"]
    balancer = _one("Deployment", "haproxy")["spec"]["template"]["metadata"]["labels"]
    policy = _one("NetworkPolicy")["spec"]
    assert policy["podSelector"]["matchLabels"] == labels
    assert set(policy["policyTypes"]) == {"Ingress", "Egress"}
    sources = [peer["podSelector"]["matchLabels"] for rule in policy["ingress"] for peer in rule["from"]]
    assert sorted(map(str, sources)) == sorted(map(str, [labels, balancer]))
    egress_ports = {p["port"] for rule in policy["egress"] for p in rule["ports"]}
    assert egress_ports == {8080, 53}
    pdb = _one("PodDisruptionBudget")["spec"]
    assert pdb["maxUnavailable"] == 1 and pdb["selector"]["matchLabels"] == labels


def _known_env_names() -> set[str]:
    """The APPLIANCE_* names load_settings reads, by its own rule: APPLIANCE_<SECTION>_<FIELD>, top-level fields
    without a section (it ignores any other name silently, so a misspelling would be lost)."""
    names = {ENV_PREFIX + "CONFIG"}
    hints = typing.get_type_hints(Settings)
    for top in dataclasses.fields(Settings):
        kind = hints[top.name]
        if not dataclasses.is_dataclass(kind):
            names.add((ENV_PREFIX + top.name).upper())
            continue
        # cluster.members is read from the boxes file, not a setting of its own
        names |= {f"{ENV_PREFIX}{top.name}_{f.name}".upper() for f in dataclasses.fields(kind) if f.name != "members"}
    return names


# The cluster settings (APPLIANCE_CLUSTER_*) are recent: where this checkout's settings lack them, check the others.
CLUSTER_KNOWN = any(f.name == "cluster" for f in dataclasses.fields(Settings))


def _manifest_env() -> dict[str, str]:
    """Every APPLIANCE_* variable of the manifests, as appliance-0 sees them."""
    env = {}
    for _, doc in DOCUMENTS:
        if doc["kind"] in ("StatefulSet", "Deployment"):
            for container in _containers(doc):
                for e in container.get("env", []):
                    if e["name"].startswith(ENV_PREFIX):
                        assert "value" in e or e["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
                        env[e["name"]] = e.get("value", "appliance-0")  # the pod's name
    return {k: v for k, v in env.items() if CLUSTER_KNOWN or not k.startswith(ENV_PREFIX + "CLUSTER_")}


def _server_settings():
    """The [server] section the manifests give (the cluster settings would need the boxes file on disk)."""
    return load_settings(env={k: v for k, v in _manifest_env().items()
                              if not k.startswith(ENV_PREFIX + "CLUSTER_")}).server


def test_the_server_accepts_the_manifests_settings(tmp_path):
    env = _manifest_env()
    unknown = sorted(set(env) - _known_env_names())
    assert not unknown, f"settings the server does not know: {unknown}"
    if CLUSTER_KNOWN:  # load_settings reads the boxes file: the ConfigMap's, written here
        boxes = tmp_path / "boxes.toml"
        boxes.write_text(_one("ConfigMap", "appliance-cluster")["data"]["boxes.toml"], encoding="utf-8")
        env[ENV_PREFIX + "CLUSTER_BOXES"] = str(boxes)
    settings = load_settings(env=env)  # raises ConfigError on a wrong value
    assert str(settings.data_dir) == "/var/lib/rag-appliance"
    assert (settings.server.host, settings.server.port) == ("0.0.0.0", 8080)
    grace = _one("StatefulSet")["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    drain_grace = settings.cluster.drain_grace_s if CLUSTER_KNOWN else 3.0
    assert grace >= drain_grace + settings.server.drain_timeout_s + 15, "SIGKILL before the drain is done"
    if CLUSTER_KNOWN:
        assert settings.cluster.self == "appliance-0"
        assert [b.name for b in settings.cluster.members] == [b["name"] for b in _boxes_toml()]
