"""JSON schemas for the custom resources of the pool-member manifest, for offline validation.

No package ships the Gateway API's or the Inference Extension's CRD schemas as kubernetes-validate
ships the core ones, so these are written here from the CRDs themselves:
- InferencePool `inference.networking.k8s.io/v1`: kubernetes-sigs/gateway-api-inference-extension,
  config/crd/bases/inference.networking.k8s.io_inferencepools.yaml;
- HTTPRoute `gateway.networking.k8s.io/v1`: kubernetes-sigs/gateway-api,
  config/crd/standard/gateway.networking.k8s.io_httproutes.yaml.
They hold the CRDs' types, patterns, enums, bounds and required fields for every field they
describe, and are strict as `kubectl apply --validate=strict` is: a field they do not describe
fails. They describe the fields these manifests use and their siblings, not every field of the
CRDs (no HTTPRoute filters, say): a manifest that comes to use one must have it added here from
the CRD. The CRDs' CEL rules (x-kubernetes-validations) that bear on those fields are checked in
Python (`cel_problems`).
"""

from typing import Any

import jsonschema

# Shapes the Kubernetes and Gateway API types share.
DNS_SUBDOMAIN_BODY = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
DNS_SUBDOMAIN = {"type": "string", "minLength": 1, "maxLength": 253, "pattern": f"^{DNS_SUBDOMAIN_BODY}$"}
GROUP = {
    "type": "string",
    "maxLength": 253,
    "pattern": r"^$|^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
}
KIND = {"type": "string", "minLength": 1, "maxLength": 63, "pattern": r"^[a-zA-Z]([-a-zA-Z0-9]*[a-zA-Z0-9])?$"}
NAME = {"type": "string", "minLength": 1, "maxLength": 253}
NAMESPACE = {"type": "string", "minLength": 1, "maxLength": 63, "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"}
PORT = {"type": "integer", "minimum": 1, "maximum": 65535}
LABEL_KEY = {  # an optional DNS-subdomain prefix and "/", then a name of up to 63 characters
    "type": "string",
    "pattern": DNS_SUBDOMAIN_BODY.join((r"^(", r"/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")),
}
LABEL_VALUE = {"type": "string", "maxLength": 63, "pattern": r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"}
DURATION = {"type": "string", "pattern": r"^([0-9]{1,5}(h|m|s|ms)){1,4}$"}


def obj(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(required), "additionalProperties": False}


def array(items: dict[str, Any], max_items: int, min_items: int = 0) -> dict[str, Any]:
    return {"type": "array", "items": items, "maxItems": max_items, "minItems": min_items}


METADATA = obj(
    {
        "name": DNS_SUBDOMAIN,
        "namespace": NAMESPACE,
        "labels": {"type": "object", "propertyNames": LABEL_KEY, "additionalProperties": LABEL_VALUE},
        "annotations": {"type": "object", "propertyNames": LABEL_KEY, "additionalProperties": {"type": "string"}},
    },
    ("name",),
)

PORT_NUMBER = obj({"number": PORT}, ("number",))

INFERENCE_POOL = obj(
    {
        "apiVersion": {"const": "inference.networking.k8s.io/v1"},
        "kind": {"const": "InferencePool"},
        "metadata": METADATA,
        "spec": obj(
            {
                "selector": obj(
                    {
                        "matchLabels": {
                            "type": "object",
                            "minProperties": 1,
                            "maxProperties": 64,
                            "propertyNames": LABEL_KEY,
                            "additionalProperties": LABEL_VALUE,
                        }
                    },
                    ("matchLabels",),
                ),
                "targetPorts": array(PORT_NUMBER, max_items=8, min_items=1),
                "appProtocol": {"enum": ["http", "kubernetes.io/h2c"]},
                "endpointPickerRef": obj(
                    {
                        "group": GROUP,
                        "kind": KIND,
                        "name": NAME,
                        "port": PORT_NUMBER,
                        "failureMode": {"enum": ["FailOpen", "FailClose"]},
                    },
                    ("name",),
                ),
            },
            ("selector", "targetPorts"),
        ),
    },
    ("apiVersion", "kind", "metadata", "spec"),
)

PATH_MATCH = obj(
    {"type": {"enum": ["Exact", "PathPrefix", "RegularExpression"]}, "value": {"type": "string", "maxLength": 1024}}
)
HEADER_MATCH = obj(
    {
        "type": {"enum": ["Exact", "RegularExpression"]},
        "name": {"type": "string", "minLength": 1, "maxLength": 256, "pattern": r"^[A-Za-z0-9!#$%&'*+\-.^_`|~]+$"},
        "value": {"type": "string", "minLength": 1, "maxLength": 4096},
    },
    ("name", "value"),
)
HTTP_ROUTE = obj(
    {
        "apiVersion": {"const": "gateway.networking.k8s.io/v1"},
        "kind": {"const": "HTTPRoute"},
        "metadata": METADATA,
        "spec": obj(
            {
                "parentRefs": array(
                    obj(
                        {
                            "group": GROUP,
                            "kind": KIND,
                            "namespace": NAMESPACE,
                            "name": NAME,
                            "sectionName": DNS_SUBDOMAIN,
                            "port": PORT,
                        },
                        ("name",),
                    ),
                    max_items=32,
                ),
                "hostnames": array(
                    {
                        "type": "string",
                        "minLength": 1,
                        "maxLength": 253,
                        "pattern": r"^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
                    },
                    max_items=16,
                ),
                "rules": array(
                    obj(
                        {
                            "name": DNS_SUBDOMAIN,
                            "matches": array(
                                obj(
                                    {
                                        "path": PATH_MATCH,
                                        "headers": array(HEADER_MATCH, max_items=16),
                                        "method": {
                                            "enum": [
                                                *("GET", "HEAD", "POST", "PUT", "DELETE"),
                                                *("CONNECT", "OPTIONS", "TRACE", "PATCH"),
                                            ]
                                        },
                                    }
                                ),
                                max_items=64,
                            ),
                            "backendRefs": array(
                                obj(
                                    {
                                        "group": GROUP,
                                        "kind": KIND,
                                        "name": NAME,
                                        "namespace": NAMESPACE,
                                        "port": PORT,
                                        "weight": {"type": "integer", "minimum": 0, "maximum": 1000000},
                                    },
                                    ("name",),
                                ),
                                max_items=16,
                            ),
                            "timeouts": obj({"request": DURATION, "backendRequest": DURATION}),
                        }
                    ),
                    max_items=16,
                    min_items=1,
                ),
            }
        ),
    },
    ("apiVersion", "kind", "metadata", "spec"),
)

SCHEMAS = {"InferencePool": INFERENCE_POOL, "HTTPRoute": HTTP_ROUTE}


def cel_problems(doc: dict[str, Any]) -> list[str]:
    """The CRDs' CEL rules on the fields described here, as their messages say them."""
    spec = doc.get("spec", {})
    problems = []
    if doc["kind"] == "InferencePool":
        numbers = [p.get("number") for p in spec.get("targetPorts", [])]
        if len(numbers) != len(set(numbers)):
            problems.append("spec.targetPorts: port number must be unique")
        ref = spec.get("endpointPickerRef")
        if ref is not None and ref.get("kind", "Service") == "Service" and "port" not in ref:
            problems.append("spec.endpointPickerRef: port is required when kind is 'Service' or unspecified")
    if doc["kind"] == "HTTPRoute":
        for i, rule in enumerate(spec.get("rules", [])):
            for j, ref in enumerate(rule.get("backendRefs", [])):
                if ref.get("group", "") == "" and ref.get("kind", "Service") == "Service" and "port" not in ref:
                    problems.append(f"spec.rules[{i}].backendRefs[{j}]: Must have port for Service reference")
            for j, match in enumerate(rule.get("matches", [])):
                path = match.get("path", {})
                value = path.get("value", "/")
                if path.get("type", "PathPrefix") in ("Exact", "PathPrefix"):
                    bad = [s for s in ("//", "/./", "/../", "%2f", "%2F", "#") if s in value]
                    if not value.startswith("/") or bad or value.endswith(("/..", "/.")):
                        problems.append(f"spec.rules[{i}].matches[{j}].path: not a clean absolute path: {value!r}")
    return problems


def problems(doc: dict[str, Any]) -> list[str]:
    """Everything wrong with a custom resource of a kind in SCHEMAS (empty when it is valid)."""
    validator = jsonschema.Draft7Validator(SCHEMAS[doc["kind"]])
    found = [f"{'.'.join(str(p) for p in e.absolute_path) or '(top)'}: {e.message}" for e in validator.iter_errors(doc)]
    return found + cel_problems(doc)
