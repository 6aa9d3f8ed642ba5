"""The aiohttp floor: the least a proxy built on aiohttp can do, and so the yardstick for the gateway.

One ClientSession on uvloop; each request's body is POSTed to the same path upstream and the
answer returned whole, or, when it is an event stream, relayed chunk by chunk as it arrives.
No parsing, no validation, no metrics.

    .venv/bin/python benchmarks/floor.py PORT UPSTREAM_URL
"""

import asyncio
import sys

import aiohttp
import uvloop
from aiohttp import web

_JSON = {"Content-Type": "application/json"}


async def main(port: int, upstream: str) -> None:
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=256), auto_decompress=False)

    async def relay(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        async with session.post(upstream + request.path_qs, data=body, headers=_JSON) as up:
            ctype = up.headers.get("Content-Type", "application/octet-stream")
            if not ctype.startswith("text/event-stream"):
                return web.Response(body=await up.read(), status=up.status, headers={"Content-Type": ctype})
            resp = web.StreamResponse(status=up.status, headers={"Content-Type": ctype})
            await resp.prepare(request)
            async for chunk in up.content.iter_any():
                await resp.write(chunk)
            await resp.write_eof()
            return resp

    app = web.Application()
    app.router.add_post("/{tail:.*}", relay)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    print(f"listening on http://127.0.0.1:{port}", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    uvloop.run(main(int(sys.argv[1]), sys.argv[2].rstrip("/")))
