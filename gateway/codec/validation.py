"""Edge validation shared by every inbound dialect: JSON body to dict, dict to wire model, and the
base of the wire models."""

from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from gateway import jsonutil
from gateway.neutral.errors import InvalidRequest

M = TypeVar("M", bound=BaseModel)


class OpenModel(BaseModel):
    """A wire model: types must match exactly (strict: nothing is converted), and fields it does
    not declare are kept (wire formats grow, and servers add their own). Its validator is built
    when first used: a gateway whose clients speak one dialect holds no other's (all of them
    take about 1.3 MiB; the first request that needs one waits a millisecond or two for it)."""

    model_config = ConfigDict(extra="allow", strict=True, defer_build=True)


def load_object(body: bytes) -> dict[str, Any]:
    if not body or body.isspace():  # (not strip(): that copies the body to look at its ends)
        raise InvalidRequest("The request body is empty; expected a JSON object", code="invalid_json")
    try:
        data = jsonutil.loads(body)
    except jsonutil.JSONDecodeError as e:
        raise InvalidRequest(f"The request body is not valid JSON: {e}", code="invalid_json") from None
    if not isinstance(data, dict):
        raise InvalidRequest("The request body must be a JSON object", code="invalid_json")
    return data


def validate(model: type[M], data: dict[str, Any]) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as e:
        err = e.errors(include_url=False)[0]
        loc = ".".join(str(p) for p in err["loc"] if not _is_union_tag(p))
        msg = err["msg"].removeprefix("Value error, ")
        more = f" (and {len(e.errors()) - 1} more problems)" if len(e.errors()) > 1 else ""
        text = f"{loc}: {msg}{more}" if loc else f"{msg}{more}"
        raise InvalidRequest(text, param=loc or None, code="invalid_value") from None


def _is_union_tag(p: object) -> bool:
    # pydantic names union members in error locations ("list[str]", "function-after[...]");
    # they mean nothing to a client.
    return isinstance(p, str) and ("[" in p or p in ("str", "int", "float", "bool", "list", "dict"))
