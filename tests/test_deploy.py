"""deploy/: Kubernetes manifests validated against the Kubernetes JSON schemas shipped in the
kubernetes-validate package (offline, strict: unknown fields fail), the InferencePool and HTTPRoute
against schemas written from their CRDs (tests/inference_crds.py, as strict), the ServiceMonitor CRD
and the Dockerfile checked structurally, the shipped gateway configs parsed by the gateway itself,
and the Grafana dashboard's queries checked against the metric names a running gateway exposes."""

import json
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from gateway.app import create_app
from gateway.config import Config, expand_env, parse_config
from gateway.dialects import registry as dialects
from tests import inference_crds
from tests.conftest import one_route
from tests.test_metrics import gateway_metrics_text, run_mix

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
K8S_VERSION = "1.30"
MANIFESTS = sorted((DEPLOY / "k8s").glob("*.yaml"))
CRD_KINDS = {"ServiceMonitor", "InferencePool", "HTTPRoute"}
DASHBOARD = DEPLOY / "grafana" / "llm-gateway-dashboard.json"


def docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def all_docs() -> list[dict[str, Any]]:
    return [d for p in MANIFESTS for d in docs(p)]


def of_kind(kind: str) -> list[dict[str, Any]]:
    return [d for d in all_docs() if d["kind"] == kind]


def test_the_expected_objects_are_there():
    kinds = sorted(d["kind"] for d in all_docs())
    assert kinds == sorted(
        [
            *("ConfigMap", "Deployment", "Service", "HorizontalPodAutoscaler", "PodDisruptionBudget"),
            *("ConfigMap", "Deployment", "Service"),
            *("ConfigMap", "Deployment", "InferencePool", "HTTPRoute"),
            "ServiceMonitor",
        ]
    )


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_manifests_validate_against_kubernetes_schemas(path):
    for doc in docs(path):
        if doc["kind"] in CRD_KINDS:
            continue
        try:
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as e:
            raise AssertionError(f"{path.name}: {doc['kind']}/{doc['metadata']['name']}: {e.message}") from None


def test_schema_validation_catches_mistakes():
    # The validator is not vacuous: a misspelt field and a wrong type both fail.
    [dep] = [d for d in docs(DEPLOY / "k8s" / "gateway.yaml") if d["kind"] == "Deployment"]
    bad = json.loads(json.dumps(dep))
    bad["spec"]["template"]["spec"]["containers"][0]["readinessprobe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, K8S_VERSION, strict=True)
    bad = json.loads(json.dumps(dep))
    bad["spec"]["replicas"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, K8S_VERSION, strict=True)


def gateway_container(dep: dict[str, Any]) -> dict[str, Any]:
    [c] = [c for c in dep["spec"]["template"]["spec"]["containers"] if c["name"] == "gateway"]
    return c


def test_deployments_probe_resources_and_users():
    for dep in of_kind("Deployment"):
        pod = dep["spec"]["template"]["spec"]
        assert dep["spec"]["selector"]["matchLabels"].items() <= dep["spec"]["template"]["metadata"]["labels"].items()
        for c in pod["containers"]:
            assert c["resources"]["requests"] and c["resources"]["limits"], c["name"]
        g = gateway_container(dep)
        assert g["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
        assert g["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
        ctx = {**pod.get("securityContext", {}), **g.get("securityContext", {})}
        assert ctx["runAsNonRoot"] is True and ctx["runAsUser"] != 0
        # A metrics port where the gateway's config gives its metrics their own listener.
        separate = deployment_config(dep).metrics.port is not None
        assert {p["name"] for p in g["ports"]} == ({"http", "metrics"} if separate else {"http"})


def test_services_hpa_and_pdb_point_at_the_pods():
    deps = {d["metadata"]["name"]: d for d in of_kind("Deployment")}
    pod_labels = [d["spec"]["template"]["metadata"]["labels"] for d in deps.values()]
    for svc in of_kind("Service"):
        assert any(svc["spec"]["selector"].items() <= labels.items() for labels in pod_labels)
        target = next(
            d
            for d in deps.values()
            if svc["spec"]["selector"].items() <= d["spec"]["template"]["metadata"]["labels"].items()
        )
        named = {p["name"] for c in target["spec"]["template"]["spec"]["containers"] for p in c.get("ports", [])}
        assert {p["targetPort"] for p in svc["spec"]["ports"]} <= named
    [hpa] = of_kind("HorizontalPodAutoscaler")
    assert hpa["apiVersion"] == "autoscaling/v2"
    ref = hpa["spec"]["scaleTargetRef"]
    assert ref["kind"] == "Deployment" and ref["name"] in deps
    assert hpa["spec"]["minReplicas"] >= 2  # the PDB below can then always be honoured
    [pdb] = of_kind("PodDisruptionBudget")
    labels = deps[ref["name"]]["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()


def config_of(configmap_name: str) -> dict[str, Any]:
    [cm] = [d for d in of_kind("ConfigMap") if d["metadata"]["name"] == configmap_name]
    data: dict[str, Any] = yaml.safe_load(cm["data"]["config.yaml"])
    return data


def deployment_config(dep: dict[str, Any]) -> Config:
    """The gateway config a Deployment mounts (its shape: secrets and dialect options aside)."""
    pod = dep["spec"]["template"]["spec"]
    [volume] = [m["name"] for m in gateway_container(dep)["volumeMounts"] if m["mountPath"] == "/etc/gateway"]
    [name] = [v["configMap"]["name"] for v in pod["volumes"] if v["name"] == volume]
    return Config.model_validate(expand_env(config_of(name), "", []))


def test_standalone_config_is_a_valid_gateway_config(monkeypatch):
    monkeypatch.setenv("VLLM_TOKEN", "t")
    monkeypatch.setenv("GATEWAY_API_KEYS", "k1,k2")
    config = parse_config(config_of("llm-gateway-config"))
    assert config.metrics.port == 9100
    assert config.logging.format == "json"
    [dep] = [d for d in of_kind("Deployment") if d["metadata"]["name"] == "llm-gateway"]
    ports = {p["name"]: p["containerPort"] for p in gateway_container(dep)["ports"]}
    assert ports == {"http": config.listen.port, "metrics": config.metrics.port}


def test_sidecar_routes_openai_clients_to_mindie_on_localhost():
    data = config_of("mindie-gateway-config")
    # Full validation (dialect options included) needs the MindIE codec; the shape is checked always.
    config = parse_config(data) if "mindie" in dialects.available() else Config.model_validate(expand_env(data, "", []))
    assert config.backends["mindie"].dialect == "mindie"
    assert config.backends["mindie"].url == "http://127.0.0.1:1025"
    assert any(r.dialect == "openai" and r.backend == "mindie" for r in config.routes)
    [dep] = [d for d in of_kind("Deployment") if d["metadata"]["name"] == "mindie-qwen"]
    names = [c["name"] for c in dep["spec"]["template"]["spec"]["containers"]]
    assert names == ["mindie", "gateway"]


@pytest.mark.parametrize("kind", sorted(inference_crds.SCHEMAS))
def test_inference_resources_validate_against_their_crd_schemas(kind):
    found = of_kind(kind)
    assert found
    for doc in found:
        assert inference_crds.problems(doc) == [], f"{kind}/{doc['metadata']['name']}"


def test_crd_schema_validation_catches_mistakes():
    [pool] = of_kind("InferencePool")
    [route] = of_kind("HTTPRoute")

    def broken(doc: dict[str, Any], change: Any) -> list[str]:
        bad = json.loads(json.dumps(doc))
        change(bad["spec"])
        return inference_crds.problems(bad)

    assert broken(pool, lambda s: s.update(targetport=[{"number": 8000}]))  # misspelt
    assert broken(pool, lambda s: s["targetPorts"].append({"number": 8000}))  # not unique
    assert broken(pool, lambda s: s["targetPorts"][0].update(number=70000))
    assert broken(pool, lambda s: s["endpointPickerRef"].pop("port"))  # a Service needs its port
    assert broken(pool, lambda s: s["endpointPickerRef"].update(failureMode="Retry"))
    assert broken(pool, lambda s: s.pop("selector"))
    assert broken(route, lambda s: s["rules"][0]["backendRefs"][0].update(kind="Service", group=""))  # no port
    assert broken(route, lambda s: s["rules"][0]["matches"][0]["path"].update(value="v1/"))
    assert broken(route, lambda s: s["rules"][0]["timeouts"].update(request="15 minutes"))
    assert broken(route, lambda s: s["rules"][0].update(backendref=[]))


def test_pool_member_pods_are_what_the_pool_selects_and_reads():
    [pool] = of_kind("InferencePool")
    [route] = of_kind("HTTPRoute")
    [dep] = [d for d in of_kind("Deployment") if d["metadata"]["name"] == "qwen-pool"]
    pod = dep["spec"]["template"]
    # The pool selects these pods, and sends requests (and the picker its scrapes) to the gateway.
    assert pool["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert [c["name"] for c in pod["spec"]["containers"]] == ["mindie", "gateway"]
    [port] = gateway_container(dep)["ports"]
    assert pool["spec"]["targetPorts"] == [{"number": port["containerPort"]}]
    # The picker reads vLLM's names from these pods (the engine-type label, else its default).
    for key in ("llm-d.ai/engine-type", "inference.networking.k8s.io/engine-type"):
        assert pod["metadata"]["labels"].get(key, "vllm") == "vllm"
    [rule] = route["spec"]["rules"]
    assert rule["backendRefs"] == [
        {"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": pool["metadata"]["name"]}
    ]
    # The gateway's config: pool-member mode, its metrics at /metrics on that same port.
    data = config_of("qwen-pool-gateway-config")
    config = parse_config(data) if "mindie" in dialects.available() else Config.model_validate(data)
    assert config.metrics.model_server_gauges is True
    assert (config.metrics.port, config.metrics.path) == (None, "/metrics")
    assert config.listen.port == port["containerPort"]
    [backend] = config.backends.values()
    assert backend.url == "http://127.0.0.1:1025" and backend.metrics_url
    assert backend.max_concurrent and config.inference_objectives
    env = {e["name"]: e["value"] for c in pod["spec"]["containers"] if c["name"] == "mindie" for e in c["env"]}
    assert env["MIES_SERVICE_MONITOR_MODE"] == "1"  # MindIE's service metrics are on


async def test_the_pool_member_config_serves_what_the_picker_reads(upstream, aiohttp_client):
    data = config_of("qwen-pool-gateway-config")
    data["backends"]["mindie"].update(url=upstream.url, metrics_url=upstream.url + "/metrics")
    client = await aiohttp_client(create_app(parse_config(data)))
    text = await (await client.get(data["metrics"]["path"])).text()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting"):
        assert families[name].type == "gauge"
        assert [(s.labels, s.value) for s in families[name].samples] == [({"model_name": "qwen2.5-7b"}, 0.0)]


def test_image_default_config_parses():
    config = parse_config(yaml.safe_load((DEPLOY / "config.yaml").read_text()))
    assert config.listen.port == 8080 and config.metrics.port == 9100


_DURATION = re.compile(r"^\d+(ms|s|m|h)$")


def test_servicemonitor_structure():
    [sm] = of_kind("ServiceMonitor")
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    assert set(sm) == {"apiVersion", "kind", "metadata", "spec"}
    assert sm["metadata"]["name"]
    spec = sm["spec"]
    assert set(spec) <= {"selector", "endpoints", "namespaceSelector", "jobLabel", "targetLabels"}
    sel = spec["selector"]
    assert set(sel) <= {"matchLabels", "matchExpressions"} and sel

    def selects(labels: dict[str, str]) -> bool:
        ok = all(labels.get(k) == v for k, v in sel.get("matchLabels", {}).items())
        for e in sel.get("matchExpressions", []):
            assert e["operator"] in {"In", "NotIn", "Exists", "DoesNotExist"}
            if e["operator"] == "In":
                ok = ok and labels.get(e["key"]) in e["values"]
        return ok

    services = of_kind("Service")
    chosen = [s for s in services if selects(s["metadata"].get("labels", {}))]
    assert {s["metadata"]["name"] for s in chosen} == {s["metadata"]["name"] for s in services}
    assert spec["endpoints"]
    for ep in spec["endpoints"]:
        assert set(ep) <= {"port", "path", "interval", "scrapeTimeout", "scheme", "honorLabels", "relabelings"}
        for s in chosen:
            assert ep["port"] in {p["name"] for p in s["spec"]["ports"]}
        assert ep["path"] == "/metrics"
        assert _DURATION.match(ep["interval"]) and _DURATION.match(ep["scrapeTimeout"])


def test_dockerfile_is_multistage_slim_nonroot_with_healthcheck():
    text = (DEPLOY / "Dockerfile").read_text().replace("\\\n", " ")  # join continued lines
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    froms = [i for i, ln in enumerate(lines) if ln.startswith("FROM ")]
    assert len(froms) >= 2
    final = lines[froms[-1] :]
    assert re.match(r"FROM python:\$\{PYTHON_VERSION\}-slim$|FROM python:[\d.]+-slim", final[0])
    final_text = "\n".join(final)
    assert "build-essential" not in final_text and "gcc" not in final_text  # build tools stay in stage 1
    assert "COPY --from=build" in final_text
    [user] = [ln for ln in final if ln.startswith("USER ")]
    assert user.split()[1].split(":")[0] not in {"0", "root"}
    [hc] = [ln for ln in final if ln.startswith("HEALTHCHECK")]
    assert "/healthz" in hc and "python" in hc and "curl" not in hc
    assert (DEPLOY / "Dockerfile.dockerignore").exists()


def test_dashboard_has_the_operator_panels():
    dash = json.loads(DASHBOARD.read_text())
    titles = " | ".join(p["title"].lower() for p in dash["panels"])
    for want in (
        "requests by status",
        "p50 / p99",
        "first token",
        "inter-token",
        "tokens per second",
        "errors",
        "in-flight",
    ):
        assert want in titles, want
    for p in dash["panels"]:
        assert p["targets"] and all(t["expr"] for t in p["targets"])


async def test_dashboard_queries_use_only_exposed_metric_names(upstream, aiohttp_client):
    client = await aiohttp_client(create_app(parse_config(one_route("openai", "openai", upstream.url))))
    await run_mix(upstream, client)
    text = await gateway_metrics_text(client)
    exposed = {s.name for f in text_string_to_metric_families(text) for s in f.samples}
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    exprs += [v["query"]["query"] for v in dash["templating"]["list"] if isinstance(v.get("query"), dict)]
    used = {m for e in exprs for m in re.findall(r"\bgateway_[a-z_]+\b", e)}
    assert len(used) >= 9
    assert used - exposed == set()
