"""The console's OIDC routes (operators/console/server.py) without an issuer: a sign-in that cannot finish lands
on the sign-in page with its reason, once, and a console without OIDC offers none."""

from __future__ import annotations

import asyncio

import aiohttp
from aiohttp.test_utils import TestClient, TestServer

from operators.console.oidc import Issuer, OidcSettings
from operators.console.server import ConsoleServer
from operators.console.settings import ConsoleSettings

DOWN = "https://127.0.0.1:9"  # the discard port: nothing listens on loopback


async def session_answer(client: TestClient) -> tuple[int, dict[str, object]]:
    response = await client.get("/console/api/session")
    return response.status, await response.json()


def test_a_sign_in_that_cannot_finish_lands_on_the_sign_in_page_with_its_reason_once() -> None:
    async def scenario() -> None:
        settings = ConsoleSettings(oidc=OidcSettings(issuer=DOWN, client_id="stead-console"))
        assert settings.oidc is not None
        server = ConsoleServer(settings, [], {})
        async with aiohttp.ClientSession() as http, TestClient(TestServer(server.app())) as client:
            server.issuer = Issuer(settings.oidc, http)
            status, answer = await session_answer(client)
            assert status == 401 and answer["oidc"] is True and answer["problem"] is None
            response = await client.get("/console/oidc/login", allow_redirects=False)
            assert response.status == 302 and response.headers["Location"] == "/console/#/signin"
            status, answer = await session_answer(client)
            assert status == 401
            assert answer["problem"] == ("the OIDC issuer is unreachable (discovery document): cannot connect to "
                                         "127.0.0.1:9")
            assert (await session_answer(client))[1]["problem"] is None  # said once
            # the issuer's redirect back without this browser's sign-in (another browser's, or a forged one)
            response = await client.get("/console/oidc/callback?code=c0de&state=s", allow_redirects=False)
            assert response.status == 302 and response.headers["Location"] == "/console/#/signin"
            problem = (await session_answer(client))[1]["problem"]
            assert isinstance(problem, str) and "started in another browser" in problem and "c0de" not in problem

    asyncio.run(scenario())


def test_a_console_without_oidc_offers_none() -> None:
    async def scenario() -> None:
        server = ConsoleServer(ConsoleSettings(), [], {})
        async with TestClient(TestServer(server.app())) as client:
            status, answer = await session_answer(client)
            assert status == 401 and "oidc" not in answer
            response = await client.get("/console/oidc/login", allow_redirects=False)
            assert response.status == 404 and "--oidc-issuer" in (await response.json())["message"]

    asyncio.run(scenario())
