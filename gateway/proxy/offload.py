"""CPU-heavy work off the event loop: chat-template rendering and tokenizing large inputs.

A few milliseconds of tokenizer work per kilobyte adds up: one multi-megabyte prompt tokenized on
the event loop's thread would stall every other request for seconds. Work on requests of at
least `OFFLOAD_BYTES` runs in a small pool of threads instead (the tokenizer lets go of the GIL
for long texts; Jinja's rendering yields it at Python's switch interval), so the loop keeps
serving. Smaller requests stay inline, where a thread hop would cost more than it saves.
"""

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

OFFLOAD_BYTES = 8 * 1024
_WORKERS = 2
_pool: ThreadPoolExecutor | None = None

P = ParamSpec("P")
T = TypeVar("T")


def _executor() -> ThreadPoolExecutor:
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(max_workers=_WORKERS, thread_name_prefix="gateway-cpu")
    return _pool


async def offload(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """`fn(*args)` on the worker pool; the caller awaits it without holding up the loop."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_executor(), lambda: fn(*args, **kwargs))
