"""Whether something answers: a component's health endpoint on loopback, or any cluster's API."""

from __future__ import annotations

import http.client
import os
import ssl
import threading
from pathlib import Path

from operators.cluster.processes import LOOPBACK


def http_status(port: int, path: str, context: ssl.SSLContext | None = None, timeout: float = 2.0) -> int | None:
    """GET http(s)://127.0.0.1:port/path and return the status, or None if it did not answer.

    HTTPS when ``context`` is given (it decides the CA and client certificate), else plain HTTP.
    """
    connection: http.client.HTTPConnection
    if context is None:
        connection = http.client.HTTPConnection(LOOPBACK, port, timeout=timeout)
    else:
        connection = http.client.HTTPSConnection(LOOPBACK, port, timeout=timeout, context=context)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        response.read()
        return response.status
    except (OSError, http.client.HTTPException):
        return None
    finally:
        connection.close()


def _answers_version(kubeconfig_source: str, timeout: float) -> bool:
    from kubernetes import client, config

    try:
        api_client = config.new_client_from_config(config_file=kubeconfig_source)
    except Exception:
        return False
    try:
        client.VersionApi(api_client).get_code(_request_timeout=timeout)
    except Exception:
        return False
    finally:
        api_client.close()
    return True


def reaches_cluster(kubeconfig: Path | None = None, timeout: float = 3.0) -> bool:
    """True when the kubeconfig's current context answers /version within ``timeout`` seconds.

    Without an argument, ``$KUBECONFIG`` (colon-separated files) or ``~/.kube/config`` is used,
    as kubectl does. ``make run`` uses this to decide whether to start the local plane. The probe
    runs in a daemon thread so that a slow credential plugin cannot stretch the wait.
    """
    source = str(kubeconfig) if kubeconfig else os.environ.get("KUBECONFIG", "")
    if not source:
        source = str(Path.home() / ".kube" / "config")
    if not any(Path(part).is_file() for part in source.split(os.pathsep) if part):
        return False
    answers: list[bool] = []
    probe = threading.Thread(
        target=lambda: answers.append(_answers_version(source, timeout)), daemon=True
    )
    probe.start()
    probe.join(timeout + 0.5)
    return bool(answers and answers[0])
