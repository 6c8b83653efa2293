"""The soak's cloud: a small KServe V2 server (aiohttp) in a process of its own, so the
soak can take it away (SIGTERM) and bring it back on the same port.

``python -m bench.soak.cloud PORT``: ``POST /v2/models/<name>/infer`` answers the BYTES
output ``answer`` (``"cloud"``), what the daemon's cloud fallback reads; ``GET
/v2/health/ready`` answers 200 so the soak can wait for it.
"""

from __future__ import annotations

import sys

from aiohttp import web

ANSWER = {"outputs": [{"name": "answer", "datatype": "BYTES", "shape": [1], "data": ["cloud"]}]}


async def infer(request: web.Request) -> web.Response:
    await request.read()
    body = {"model_name": request.match_info["name"], **ANSWER}
    return web.json_response(body)


async def ready(_request: web.Request) -> web.Response:
    return web.Response(text="ok")


def app() -> web.Application:
    application = web.Application()
    application.router.add_post("/v2/models/{name}/infer", infer)
    application.router.add_get("/v2/health/ready", ready)
    return application


def main(argv: list[str]) -> None:
    web.run_app(app(), host="127.0.0.1", port=int(argv[0]), print=None, reuse_address=True)


if __name__ == "__main__":
    main(sys.argv[1:])
