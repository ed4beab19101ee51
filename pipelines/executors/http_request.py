"""`http`: one HTTP request, its status checked, values taken from its JSON response.

Parameters: ``method`` (default GET), ``url``, ``headers`` (name -> value), ``body`` (text sent as
is; a mapping or list is sent as JSON with ``Content-Type: application/json`` unless a header says
otherwise), ``expectedStatus`` (codes that count as success; default any 2xx), ``variables``
(name -> path into the JSON response, ``a.b[0].c``, optionally starting with ``$.``),
``insecureSkipTLSVerify``. The step's ``timeoutSeconds`` bounds the request and its
``retries``/``retryIntervalSeconds`` repeat it: retrying belongs to the engine, for every type.

It uses the standard library's client. The blocking call runs in a helper thread so that an abort
is honoured at once: the step returns "aborted" and the abandoned request ends at its timeout.
Connections go only where `egress.EgressPolicy` lets them: not to the runner's own host
(loopback, its interface addresses) nor to link-local metadata endpoints, unless allowed.
"""

from __future__ import annotations

import json
import re
import ssl
import threading
import urllib.error
import urllib.request
from typing import Any

from pipelines.executors.base import ParameterError, StepContext, StepFailed, StepResult, parameter
from pipelines.executors.egress import EgressPolicy

_PATH_TOKEN = re.compile(r"([^.\[\]]+)|\[(-?\d+)\]")
DEFAULT_TIMEOUT = 30.0
_SHOWN_BODY = 16 * 1024


def json_path(document: Any, path: str) -> Any:
    """Follow ``a.b[0].c`` (or ``$.a.b[0].c``) into a decoded JSON document; KeyError if absent."""
    if path.startswith("$"):
        path = path[1:].lstrip(".")
    current = document
    for name, index in _PATH_TOKEN.findall(path):
        if index:
            if not isinstance(current, list):
                raise KeyError(path)
            try:
                current = current[int(index)]
            except IndexError:
                raise KeyError(path) from None
        else:
            if not isinstance(current, dict) or name not in current:
                raise KeyError(path)
            current = current[name]
    return current


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


class HttpExecutor:
    def __init__(self, policy: EgressPolicy | None = None) -> None:
        self.policy = policy or EgressPolicy()

    def run(self, ctx: StepContext) -> StepResult:
        url = parameter(ctx, "url", str)
        if not url.startswith(("http://", "https://")):
            raise ParameterError(f"http step {ctx.step_id!r}: url must be http:// or https://")
        method = parameter(ctx, "method", str, "GET").upper()
        headers = {str(k): _text(v) for k, v in parameter(ctx, "headers", dict, {}).items()}
        body = ctx.parameters.get("body")
        data: bytes | None = None
        if isinstance(body, str):
            data = body.encode()
        elif body is not None:
            data = json.dumps(body).encode()
            if not any(k.lower() == "content-type" for k in headers):
                headers["Content-Type"] = "application/json"
        expected = parameter(ctx, "expectedStatus", list, [])
        wanted = {int(code) for code in expected}
        paths = parameter(ctx, "variables", dict, {})
        context = None
        if url.startswith("https://") and parameter(ctx, "insecureSkipTLSVerify", bool, False):
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        remaining = ctx.remaining()
        timeout = DEFAULT_TIMEOUT if remaining is None else max(remaining, 0.001)
        ctx.check()
        request = urllib.request.Request(url, data=data, method=method, headers=headers)
        ctx.output(f"{method} {url}", "stderr")
        outcome: list[tuple[int, str, bytes] | BaseException] = []
        done = threading.Event()

        def call() -> None:
            try:
                with self.policy.opener(context).open(request, timeout=timeout) as response:
                    outcome.append((response.status, str(response.reason), response.read()))
            except urllib.error.HTTPError as err:
                outcome.append((err.code, str(err.reason), err.read()))
            except BaseException as err:
                outcome.append(err)
            finally:
                done.set()

        threading.Thread(target=call, daemon=True, name=f"http-{ctx.key}").start()
        while not done.wait(0.1):
            ctx.check()
        ctx.check()
        result = outcome[0]
        if isinstance(result, BaseException):
            reason = getattr(result, "reason", result)
            raise StepFailed(f"http step {ctx.step_id!r}: {method} {url}: {reason}")
        status, reason, raw = result
        text = raw.decode("utf-8", errors="replace")
        ctx.output(f"HTTP {status} {reason}", "stderr")
        shown = text if len(text) <= _SHOWN_BODY else text[:_SHOWN_BODY] + "\n[... body truncated]"
        for line in shown.splitlines():
            ctx.output(line, "stdout")
        details = {"statusCode": status}
        ok = status in wanted if wanted else 200 <= status < 300
        if not ok:
            want = ", ".join(str(c) for c in sorted(wanted)) if wanted else "2xx"
            raise StepFailed(f"{method} {url}: HTTP {status} {reason} (expected {want})", details=details)
        variables: dict[str, str] = {}
        if paths:
            try:
                document = json.loads(text)
            except ValueError:
                raise StepFailed(f"{method} {url}: the response is not JSON", details=details) from None
            for name, path in paths.items():
                try:
                    variables[str(name)] = _text(json_path(document, str(path)))
                except KeyError:
                    raise StepFailed(f"{method} {url}: no {path!r} in the response", details=details) from None
        return StepResult(variables=variables, message=f"HTTP {status}", details=details)
