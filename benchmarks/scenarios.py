"""What is measured: each way through the gateway as one declaration, and the gateway
configuration made of them.

A scenario is a client (an inbound dialect's request, whole and streamed: `Client`), a backend
behind the stub (`Upstream`) and the stub's answer it gets (a key of `stub.ANSWERS`). Adding one
is one entry in SCENARIOS; every scenario is measured as JSON and stream at many connections
and as JSON at one, and, with `paced=True`, as paced streams. A client or backend that does not
exist yet is one declaration more: a `Client` of a new body (`OPENAI_CHAT.asking("alias")` for a
model alias), an `Upstream` of a new base path under the stub (a recorded answer of a server
that `stub.ANSWERS` serves there), with the route's own settings (`route={"models": [...]}`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

CHAT = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Say hello"}]}
INFER_TOKEN = {"input_id": [9906, 11, 1268, 527, 499, 3432, 30], "parameters": {"max_new_tokens": 256, "details": True}}
TGI = {"inputs": "Say hello", "parameters": {"max_new_tokens": 256}}
CHAT_PATH = "/v1/chat/completions"
# The gateway's routes: /json/KEY, /stream/KEY and /paced/KEY, each on a backend of its own
# whose url picks whole answers, streams or the paced streams.
VARIANTS = ("json", "stream", "paced")


@dataclass(frozen=True)
class Client:
    """What a client of one inbound dialect sends, and the shape its answers come in (openai:
    chat; mindie: native; tgi), which is how they are checked (benchmarks.answers)."""

    dialect: str
    shape: str
    json_path: str
    stream_path: str
    json_body: dict[str, Any]
    stream_body: dict[str, Any]

    def path(self, stream: bool) -> str:
        return self.stream_path if stream else self.json_path

    def body(self, stream: bool) -> dict[str, Any]:
        return self.stream_body if stream else self.json_body

    def asking(self, model: str) -> Client:
        """The same request for another model name (an alias a route lists)."""
        return replace(
            self, json_body={**self.json_body, "model": model}, stream_body={**self.stream_body, "model": model}
        )


@dataclass(frozen=True)
class Upstream:
    """A backend of the gateway's configuration, served by the stub: `base` is its url's path
    under the stub (stub.Answer.base), `settings` the rest of its configuration; scenarios that
    share one share the backend."""

    name: str
    dialect: str
    base: str = ""
    settings: dict[str, Any] = field(default_factory=dict)
    tokenizer: bool = False  # given the run's tokenizer folder (a chat template reaches it)


@dataclass(frozen=True)
class Scenario:
    """One way through the gateway: the client, the backend, and the answer the backend gives."""

    key: str  # the routes' prefixes (/json/KEY, /stream/KEY, /paced/KEY) and the rows' name
    title: str
    client: Client
    upstream: Upstream
    answer: str  # a key of stub.ANSWERS
    translating: bool = True
    paced: bool = False  # also measured as paced streams
    route: dict[str, Any] = field(default_factory=dict)  # the route's own settings (models: ...)
    latency: bool = True  # also measured at one connection (JSON)


OPENAI_CHAT = Client("openai", "openai", CHAT_PATH, CHAT_PATH, CHAT, {**CHAT, "stream": True})
MINDIE_INFER_TOKEN = Client(
    "mindie",
    "mindie",
    "/infer_token",
    "/infer_token",
    {**INFER_TOKEN, "stream": False},
    {**INFER_TOKEN, "stream": True},
)
TGI_GENERATE = Client("tgi", "tgi", "/generate", "/generate_stream", TGI, TGI)
# Databricks chat answers are OpenAI's chat shape.
DATABRICKS_CHAT = Client(
    "databricks",
    "openai",
    "/serving-endpoints/gpt-4o-mini/invocations",
    "/serving-endpoints/gpt-4o-mini/invocations",
    {"messages": CHAT["messages"]},
    {"messages": CHAT["messages"], "stream": True},
)

ANTHROPIC_MESSAGES = Client(
    "anthropic",
    "anthropic",
    "/v1/messages",
    "/v1/messages",
    {"model": "claude-sonnet-4", "max_tokens": 256, "messages": CHAT["messages"]},
    {"model": "claude-sonnet-4", "max_tokens": 256, "messages": CHAT["messages"], "stream": True},
)
# The Responses API is served on OpenAI routes. `store: false`: nothing kept per response (the
# soak's memory is the gateway's, not a store's).
RESPONSES_API = Client(
    "openai",
    "responses",
    "/v1/responses",
    "/v1/responses",
    {"model": "gpt-4o-mini", "input": "Say hello", "store": False},
    {"model": "gpt-4o-mini", "input": "Say hello", "store": False, "stream": True},
)
# A chat with a function tool: its answers are read for calls (docs/tools.md).
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
OPENAI_CHAT_TOOLS = Client(
    "openai", "openai", CHAT_PATH, CHAT_PATH, {**CHAT, "tools": [WEATHER]}, {**CHAT, "tools": [WEATHER], "stream": True}
)

OPENAI = Upstream("openai", "openai")
# The usual deployment: clients ask for `gpt-4o-mini`, the backend serves a model of another name,
# so every answer and stream event has its model renamed on the way back.
OPENAI_ALIASED = Upstream("openai-aliased", "openai", settings={"model": "/models/Qwen2.5-7B-Instruct"})
MINDIE = Upstream("mindie", "mindie", "/mindie", {"model": "qwen"})  # chat goes to MindIE's /v1/chat/completions
TRITON = Upstream("triton", "triton", settings={"model": "bench", "options": {"flavor": "trtllm"}}, tokenizer=True)


def recorded(name: str, dialect: str, settings: dict[str, Any], tokenizer: bool = False) -> Upstream:
    """A backend answered with a real server's recorded shapes (benchmarks.recorded)."""
    return Upstream("rec-" + name.replace(" ", "-"), dialect, "/rec/" + name.replace(" ", "-"), settings, tokenizer)


def triton(flavor: str, name: str) -> Upstream:
    return recorded(name, "triton", {"model": "bench", "options": {"flavor": flavor}}, tokenizer=True)


VLLM = recorded("vllm chat", "openai", {"model": "tiny"})
# The same server for a Responses client, asked in chat: vLLM serves /v1/responses itself, which
# the stub does not.
VLLM_CHAT_ONLY = Upstream(
    "rec-vllm-chat-only", "openai", VLLM.base, {"model": "tiny", "options": {"responses_api": False}}
)
REAL = "real shapes"  # titles: a backend answered with a real server's recorded stream and answer

SCENARIOS = [
    Scenario(
        "openai-openai",
        "OpenAI -> OpenAI (pass-through)",
        OPENAI_CHAT,
        OPENAI,
        "openai chat",
        translating=False,
        paced=True,
    ),
    Scenario(
        "openai-openai-alias",
        "OpenAI -> OpenAI (pass-through, model aliased)",
        OPENAI_CHAT,
        OPENAI_ALIASED,
        "openai chat",
        translating=False,
        paced=True,
        latency=False,
    ),
    Scenario(
        "openai-vllm",
        "OpenAI -> vLLM (pass-through, model aliased)",
        OPENAI_CHAT,
        VLLM,
        "vllm chat",
        translating=False,
        paced=True,
        latency=False,
    ),
    Scenario(
        "anthropic-anthropic",
        "Messages -> Messages (pass-through, vLLM's shapes)",
        ANTHROPIC_MESSAGES,
        recorded("anthropic", "anthropic", {"model": "tiny"}),
        "anthropic",
        translating=False,
        paced=True,
        latency=False,
    ),
    Scenario(
        "responses-responses",
        "Responses -> Responses (pass-through, vLLM's shapes)",
        RESPONSES_API,
        recorded("responses", "responses", {"model": "tiny"}),
        "responses",
        translating=False,
        paced=True,
        latency=False,
    ),
    Scenario("openai-mindie", "OpenAI -> MindIE chat", OPENAI_CHAT, MINDIE, "mindie chat", paced=True),
    Scenario("openai-triton", "OpenAI -> Triton (TRT-LLM, chat template)", OPENAI_CHAT, TRITON, "triton generate"),
    # The same answers read for tool calls (emulated tools): each event through the parser.
    Scenario(
        "openai-triton-tools",
        "OpenAI with tools -> Triton (TRT-LLM, calls read from the text)",
        OPENAI_CHAT_TOOLS,
        replace(TRITON, name="triton-tools", settings={**TRITON.settings, "tool_parser": "hermes"}),
        "triton generate",
    ),
    # Token ids go to /v1/completions as the prompt.
    Scenario("mindie-openai", "MindIE /infer_token -> OpenAI", MINDIE_INFER_TOKEN, OPENAI, "openai completion"),
    Scenario("tgi-openai", "TGI /generate -> OpenAI", TGI_GENERATE, OPENAI, "openai completion"),
    Scenario("databricks-openai", "Databricks invocations -> OpenAI", DATABRICKS_CHAT, OPENAI, "openai chat"),
    *(
        Scenario(key, title, client, upstream, answer, paced=True, latency=False)
        for key, title, client, upstream, answer in (
            (
                "openai-triton-minimal",
                "OpenAI -> Triton minimal",
                OPENAI_CHAT,
                triton("trtllm", "triton minimal"),
                "triton minimal",
            ),
            (
                "openai-triton-trtllm",
                "OpenAI -> Triton TRT-LLM",
                OPENAI_CHAT,
                triton("trtllm", "triton trtllm"),
                "triton trtllm",
            ),
            (
                "openai-triton-vllm",
                "OpenAI -> Triton vLLM backend",
                OPENAI_CHAT,
                triton("vllm", "triton vllm"),
                "triton vllm",
            ),
            (
                "openai-triton-mindie",
                "OpenAI -> Triton MindIE",
                OPENAI_CHAT,
                triton("mindie", "triton mindie"),
                "triton mindie",
            ),
            ("openai-tgi", "OpenAI -> TGI", OPENAI_CHAT, recorded("tgi", "tgi", {}, tokenizer=True), "tgi"),
            (
                "tgi-mindie",
                "TGI -> MindIE /infer",
                TGI_GENERATE,
                recorded("mindie native", "mindie", {"model": "qwen"}),
                "mindie native",
            ),
            (
                "openai-databricks",
                "OpenAI -> Databricks",
                OPENAI_CHAT,
                recorded("databricks chat", "databricks", {"model": "bench"}),
                "databricks chat",
            ),
            ("anthropic-vllm", "Messages -> vLLM", ANTHROPIC_MESSAGES, VLLM, "vllm chat"),
            ("responses-vllm", "Responses -> vLLM", RESPONSES_API, VLLM_CHAT_ONLY, "vllm chat"),
            (
                "openai-anthropic",
                "OpenAI -> Messages (vLLM's)",
                OPENAI_CHAT,
                recorded("anthropic", "anthropic", {"model": "tiny"}),
                "anthropic",
            ),
            (
                "openai-responses",
                "OpenAI -> Responses (vLLM's)",
                OPENAI_CHAT,
                recorded("responses", "responses", {"model": "tiny"}),
                "responses",
            ),
        )
    ),
]
PASS_THROUGH = SCENARIOS[0]
PACED = [sc for sc in SCENARIOS if sc.paced]
# The floor and direct rows: OpenAI chat at the stub's own paths, the streams under /stream.
BASELINE = Scenario(
    "openai-chat",
    "OpenAI chat",
    replace(OPENAI_CHAT, stream_path="/stream" + CHAT_PATH),
    OPENAI,
    "openai chat",
    translating=False,
)


def path(sc: Scenario, variant: str, stream: bool) -> str:
    """The gateway's path for the scenario's request in one variant (json, stream, paced)."""
    return f"/{variant}/{sc.key}{sc.client.path(stream)}"


def gateway_config(tokenizer: Path, nginx_port: int, paced_port: int) -> dict[str, Any]:
    """Every scenario's routes, by prefix, on the stub (nginx) and the paced upstream. The
    limits' defaults (1024 requests in flight, 256 connections per backend) do not hold 64
    connections back."""
    upstreams = {
        "json": f"http://127.0.0.1:{nginx_port}",
        "stream": f"http://127.0.0.1:{nginx_port}/stream",
        "paced": f"http://127.0.0.1:{paced_port}/stream",
    }
    backends: dict[str, Any] = {}
    routes = []
    for variant in VARIANTS:
        for sc in PACED if variant == "paced" else SCENARIOS:
            up = sc.upstream
            name = f"{up.name}-{variant}"
            backends[name] = {"dialect": up.dialect, "url": upstreams[variant] + up.base, **up.settings}
            if up.tokenizer:
                backends[name]["tokenizer"] = str(tokenizer)
            route = {"name": f"{sc.key}-{variant}", "dialect": sc.client.dialect, "backend": name}
            routes.append({**route, "prefix": f"/{variant}/{sc.key}", **sc.route})
    return {
        "listen": {"host": "127.0.0.1", "port": 0},
        # No access log: the floor writes none either; what logging costs is the deployment's choice.
        "logging": {"access_log": False},
        # Stopping must not wait: nothing is in flight when the benchmark stops the gateway.
        "shutdown": {"drain_delay_s": 0, "grace_s": 1},
        "backends": backends,
        "routes": routes,
    }
