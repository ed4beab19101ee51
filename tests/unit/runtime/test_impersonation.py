"""`Impersonating`: the API server's client acting as the caller sends Kubernetes' impersonation headers, a
group per header, on every request it makes (and the client alone sends none)."""

from __future__ import annotations

import asyncio

from aiohttp import web

from operators.runtime.kube.client import ClusterAccess, Impersonating, KubeClient


def test_impersonation_headers_name_the_user_each_group_and_the_uid() -> None:
    seen: list[dict[str, object]] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append({"user": request.headers.get("Impersonate-User"), "uid": request.headers.get("Impersonate-Uid"),
                     "groups": request.headers.getall("Impersonate-Group", []),
                     "type": request.headers.get("Content-Type")})
        return web.json_response({})

    async def main() -> None:
        app = web.Application()
        app.router.add_route("*", "/{path:.*}", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        try:
            async with KubeClient(ClusterAccess(server=f"http://127.0.0.1:{port}", ssl_context=None)) as kube:
                caller = Impersonating(kube, "system:serviceaccount:t:tenant",
                                       ["system:serviceaccounts", "system:authenticated"], "u-1")
                await caller.request("POST", "/x", {"a": 1})
                await caller.request("DELETE", "/x")
                await kube.request("GET", "/x")
        finally:
            await runner.cleanup()

    asyncio.run(main())
    as_caller = {"user": "system:serviceaccount:t:tenant", "uid": "u-1",
                 "groups": ["system:serviceaccounts", "system:authenticated"]}
    assert seen == [{**as_caller, "type": "application/json"}, {**as_caller, "type": None},
                    {"user": None, "uid": None, "groups": [], "type": None}]
