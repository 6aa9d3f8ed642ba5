"""The config file: ${VAR} expansion, validation messages naming the key path, cross-references,
dialect options and path collisions."""

from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from gateway.codec.contract import Dialect, Mount, NoOptions, Reply
from gateway.config import ConfigError, parse_config, route_paths
from gateway.configfile import embedded_default, load_config
from gateway.dialects import registry as dialects
from gateway.neutral.errors import GatewayError


def cfg(**backend: Any) -> dict[str, Any]:
    b = {"dialect": "openai", "url": "http://h:1", **backend}
    return {"backends": {"up": b}, "routes": [{"name": "r", "dialect": "openai", "backend": "up"}]}


def problems(data: Any) -> list[str]:
    with pytest.raises(ConfigError) as ei:
        parse_config(data)
    assert str(ei.value) == "\n".join(ei.value.lines)
    return ei.value.lines


def test_minimal_config_defaults():
    c = parse_config(cfg())
    assert c.listen.host == "127.0.0.1" and c.listen.port == 8080
    assert c.limits.max_body_bytes == 4 * 1024 * 1024
    assert c.metrics.path == "/metrics"
    assert c.auth is None
    assert c.backends["up"].timeout_s == 600
    assert c.routes[0].prefix == ""


def test_env_expansion(monkeypatch):
    monkeypatch.setenv("TOKEN", "s3cret")
    monkeypatch.setenv("HOST", "10.0.0.5")
    monkeypatch.delenv("UNSET_ONE", raising=False)
    data = cfg(
        url="http://${HOST}:${PORT:-1025}/base",
        headers={"Authorization": "Bearer ${TOKEN}", "X-Empty": "${UNSET_ONE:-}", "X-Both": "${TOKEN:-d}-${HOST}"},
    )
    data["routes"][0]["models"] = ["${MODEL_NAME:-qwen}", "literal $ and ${ not closed"]
    c = parse_config(data)
    b = c.backends["up"]
    assert b.url == "http://10.0.0.5:1025/base"
    assert b.headers == {"Authorization": "Bearer s3cret", "X-Empty": "", "X-Both": "s3cret-10.0.0.5"}
    assert c.routes[0].models == ["qwen", "literal $ and ${ not closed"]


def test_missing_env_var_is_an_error_naming_the_key(monkeypatch):
    monkeypatch.delenv("NOPE_TOKEN", raising=False)
    monkeypatch.delenv("NOPE_HOST", raising=False)
    data = cfg(url="http://${NOPE_HOST}:1", headers={"Authorization": "Bearer ${NOPE_TOKEN}"})
    assert problems(data) == [
        "backends.up.url: environment variable NOPE_HOST is not set",
        "backends.up.headers.Authorization: environment variable NOPE_TOKEN is not set",
    ]


@pytest.mark.parametrize(
    "target",
    [
        {"url": None},
        {"urls": ["http://a:1"]},
        {"simulate": True},
        {"url": None, "urls": []},
    ],
)
def test_exactly_one_target(target):
    data = cfg(**target)
    data["backends"]["up"] = {k: v for k, v in data["backends"]["up"].items() if v is not None}
    assert problems(data) == ["backends.up: exactly one of url, urls, simulate must be set"]


def test_single_targets_are_fine():
    assert parse_config(cfg()).backends["up"].targets() == ["http://h:1"]
    c = parse_config(cfg(url=None, urls=["http://a:1", "https://b:2/p"]))
    assert c.backends["up"].targets() == ["http://a:1", "https://b:2/p"]
    c = parse_config(
        {
            "backends": {"s": {"dialect": "openai", "simulate": True}},
            "routes": [{"name": "r", "dialect": "openai", "backend": "s"}],
        }
    )
    assert c.backends["s"].targets() == []


def test_bad_urls_and_values():
    assert problems(cfg(url="ftp://h/x")) == ["backends.up.url: not an http(s) or unix-socket URL: 'ftp://h/x'"]
    assert problems(cfg(timeout_s=0)) == ["backends.up.timeout_s: Input should be greater than 0"]
    assert problems(cfg(dialect="grpc"))[0].startswith("backends.up.dialect: Input should be 'openai', ")


def test_unknown_keys_are_errors():
    data = cfg(bogus_key=1)
    data["listen"] = {"port": 70000, "hots": "x"}
    assert problems(data) == [
        "listen.port: Input should be less than or equal to 65535",
        "listen.hots: Extra inputs are not permitted",
        "backends.up.bogus_key: Extra inputs are not permitted",
    ]


def test_a_tool_parser_is_one_the_gateway_reads():
    assert problems(cfg(tool_parser="hermes2")) == [
        "backends.up.tool_parser: Input should be 'hermes', 'llama3_json', 'mistral', 'pythonic' or 'qwen3_coder'"
    ]
    assert parse_config(cfg(tool_parser="llama3_json")).backends["up"].tool_parser == "llama3_json"


def test_unknown_openai_option_is_an_error():
    assert problems(cfg(options={"bogus": 1})) == ["backends.up.options.bogus: Extra inputs are not permitted"]
    assert problems(cfg(options={"extensions": "sglang"})) == [
        "backends.up.options.extensions: Input should be 'none' or 'vllm'"
    ]
    assert parse_config(cfg(options={"extensions": "vllm"})).backends["up"].options == {"extensions": "vllm"}


def test_route_references_and_names():
    data = cfg()
    data["routes"] = [
        {"name": "r", "dialect": "openai", "backend": "missing"},
        {"name": "r", "dialect": "openai", "backend": "up"},
    ]
    assert problems(data) == [
        "routes.0.backend: unknown backend 'missing'",
        "routes.1.name: duplicate route name 'r'",
    ]
    data["routes"] = [{"name": "r", "dialect": "openai", "backend": "up", "prefix": "edge/"}]
    assert problems(data) == ["routes.0.prefix: must start with / and not end with /"]
    assert problems({"backends": {}}) == ["routes: Field required"]
    assert problems([1]) == ["(top level): must be a mapping"]
    assert problems(None) == ["(top level): must be a mapping"]


def test_same_dialect_routes_share_paths():
    data = cfg()
    data["routes"] = [
        {"name": "a", "dialect": "openai", "backend": "up", "models": ["x"]},
        {"name": "b", "dialect": "openai", "backend": "up"},
        {"name": "c", "dialect": "openai", "backend": "up", "prefix": "/edge"},
    ]
    c = parse_config(data)
    assert [r.name for r in c.routes] == ["a", "b", "c"]
    assert route_paths(c)["c"][0] == ("POST", "/edge/v1/chat/completions")


class _FakeInbound:
    name = "mindie"
    mounts = (Mount("POST", "/generate"), Mount("POST", "/v1/chat/completions"), Mount("GET", "/v1/models"))

    def error_reply(self, err: GatewayError) -> Reply:
        return Reply(err.status)


class _FakeOutbound:
    name = "mindie"
    options_model: type[BaseModel] = NoOptions
    shared_credentials = False


def test_cross_dialect_path_collision(monkeypatch):
    # A stand-in second dialect that mounts OpenAI's paths, as MindIE does.
    monkeypatch.setitem(dialects.DIALECTS, "mindie", Dialect("mindie", _FakeInbound(), _FakeOutbound()))  # type: ignore[arg-type]
    data = cfg()
    data["backends"]["m"] = {"dialect": "mindie", "url": "http://m:1"}
    data["routes"].append({"name": "mi", "dialect": "mindie", "backend": "m"})
    assert problems(data) == [
        "routes.1.prefix: route 'mi' (mindie) and route 'r' (openai) both mount POST /v1/chat/completions; "
        "give one of them a prefix"
    ]
    data["routes"][1]["prefix"] = "/mindie"
    c = parse_config(data)
    assert route_paths(c)["mi"] == [
        ("POST", "/mindie/generate"),
        ("POST", "/mindie/v1/chat/completions"),
        ("GET", "/mindie/v1/models"),
    ]
    data["backends"]["m"]["options"] = {"anything": 1}
    assert problems(data) == ["backends.m.options.anything: Extra inputs are not permitted"]


def test_real_openai_and_mindie_routes_collide():
    data = cfg()
    data["backends"]["m"] = {"dialect": "mindie", "url": "http://m:1"}
    data["routes"].append({"name": "mi", "dialect": "mindie", "backend": "m"})
    assert problems(data) == [
        "routes.1.prefix: route 'mi' (mindie) and route 'r' (openai) both mount POST /v1/chat/completions; "
        "give one of them a prefix"
    ]
    data["routes"][1]["prefix"] = "/mindie"
    assert [r.name for r in parse_config(data).routes] == ["r", "mi"]


def test_load_config_file_errors(tmp_path: Path):
    assert_lines = lambda p: load_problems(p)  # noqa: E731
    missing = tmp_path / "missing.yaml"
    assert assert_lines(missing) == [f"{missing}: cannot read: No such file or directory"]
    bad = tmp_path / "bad.yaml"
    bad.write_text("backends: {up: [\n")
    (line,) = assert_lines(bad)
    assert line.startswith(f"{bad}: not valid YAML (line ")
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert assert_lines(empty) == ["(top level): must be a mapping"]


def load_problems(path: Path) -> list[str]:
    with pytest.raises(ConfigError) as ei:
        load_config(path)
    return ei.value.lines


def test_load_config_file(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("UP_URL", "http://10.1.1.1:8000")
    f = tmp_path / "gw.yaml"
    f.write_text(
        "listen: {host: 0.0.0.0, port: 9000}\n"
        "auth: {api_keys: [k1]}\n"
        "limits: {max_body_bytes: 1000}\n"
        "backends:\n  up: {dialect: openai, url: '${UP_URL}', options: {extensions: vllm}}\n"
        "routes:\n  - {name: chat, dialect: openai, backend: up, models: [a, b]}\n"
    )
    c = load_config(f)
    assert c.listen.port == 9000 and c.listen.host == "0.0.0.0"
    assert c.auth is not None and c.auth.keys() == frozenset({"k1"})
    assert c.limits.max_body_bytes == 1000
    assert c.backends["up"].url == "http://10.1.1.1:8000"
    assert c.routes[0].models == ["a", "b"]


def test_embedded_default_mounts_every_dialect_clients_speak():
    c = embedded_default()
    avail = dialects.inbound_names()
    assert "openai" in avail
    assert [r.dialect for r in c.routes][: len(avail)] == avail
    assert all(b.simulate for b in c.backends.values())
    assert next(r for r in c.routes if r.dialect == "openai").prefix == ""
    assert c.listen.host == "127.0.0.1" and c.listen.port == 8080


def test_embedded_default_puts_an_openai_chat_in_front_of_each_text_only_simulator():
    c = embedded_default()
    fronts = {r.prefix: c.backends[r.backend] for r in c.routes if r.dialect == "openai" and r.prefix}
    assert {p: b.dialect for p, b in fronts.items()} == {"/tgi": "tgi", "/triton": "triton"}
    for b in [*fronts.values(), c.backends["sim-mindie"]]:
        assert b.tool_parser == "hermes" and b.tokenizer is not None


@pytest.mark.parametrize(
    "target",
    [
        {"url": "unix:/run/vllm.sock"},
        {"url": "http+unix://%2Frun%2Fvllm.sock/prefix?api-version=1"},
        {"url": "https://h/openai?api-version=2024-06-01"},
        {"url": None, "urls": ["unix:/run/a.sock", "http://b:1"]},
        {"metrics_url": "unix:/run/vllm.sock"},
    ],
)
def test_unix_sockets_and_base_queries_are_backend_urls(target):
    data = cfg(**target)
    data["backends"]["up"] = {k: v for k, v in data["backends"]["up"].items() if v is not None}
    parse_config(data)


@pytest.mark.parametrize(
    "proxy", ["none", "None", "http://proxy.corp:3128", "proxy.corp:3128", "http://u:p@proxy.corp"]
)
def test_a_backends_proxy_is_a_proxy_url_or_none(proxy):
    assert parse_config(cfg(proxy=proxy)).backends["up"].proxy == proxy


def test_a_proxy_the_gateway_cannot_use_is_a_config_error_without_its_credentials(monkeypatch):
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    assert problems(cfg(proxy="socks5://u:hunter22@p:1080")) == [
        "backends.up.proxy: socks5://p:1080: only an http:// proxy is supported (CONNECT is sent to it in plain HTTP)"
    ]
    # The environment's, for a scheme a backend's URLs have: named by its variable.
    monkeypatch.setenv("ALL_PROXY", "socks5h://p:1080")
    assert problems(cfg(url="https://h")) == [
        "backends.up: ALL_PROXY (from the environment): socks5h://p:1080: only an http:// proxy is supported "
        "(CONNECT is sent to it in plain HTTP)"
    ]
    monkeypatch.setenv("https_proxy", "http://p:3128")
    parse_config(cfg(url="https://h"))  # https_proxy is the one https backends use
    parse_config(cfg(url="https://h", proxy="none"))
