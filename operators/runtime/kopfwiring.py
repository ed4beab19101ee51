"""The Kopf adapter: the only module that imports Kopf.

Kopf serves the admission webhooks and runs the operator's lifecycle; it does not watch. The
reconcilers are fed by Stead's own list+watch (`operators.runtime.kube.watch`): Kopf's watches
send no label selector (with several replicas every one would receive every event) and its
per-event machinery cost about a third of the operator's CPU per object.

A kind gets a validating webhook only if it has checks its CRD schema cannot express; a mutating
one only if it mutates or holds a finalizer, and, with several replicas (`label_buckets`), every
namespaced kind gets one that sets the bucket label the replicas' watches select by.

`prepare_kopf` registers the webhooks (and, in local mode, their configurations) and returns
what starts Kopf; `operators.runtime.process` calls it between building the engine and starting
the rest of the process, so that the order of start-up stays one place's business.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import tempfile
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kopf

from operators import GROUP, VERSION
from operators.runtime.core.kinds import FINALIZER, AdmissionRequest, Kind, Refusal
from operators.runtime.engine.services import Services
from operators.runtime.kube.admission import (
    MUTATING_CONFIGURATION,
    WEBHOOK_CONFIGURATION,
    handler_id,
    mutating_configuration,
    mutating_handler_id,
    validated_operations,
    validating_configuration,
)
from operators.runtime.kube.client import ApiError, KubeClient, Requester, bearer_token, load_configuration
from operators.runtime.serving.certs import KeyPair, make_ca, make_leaf
from operators.runtime.serving.tls import reload_certificate, server_context, write_private
from operators.runtime.shard import BUCKET_LABEL, bucket_label

log = logging.getLogger(__name__)

StartKopf = Callable[[Sequence[str], "asyncio.Event | None", asyncio.Event], Awaitable[None]]
"""Runs Kopf until stopped: (namespaces, stop flag, ready flag); no namespaces: cluster-wide."""


@dataclass(frozen=True)
class WebhookOptions:
    """Where the admission webhook server listens and how the API server reaches it.

    `register_url` set: local mode, Stead registers a ValidatingWebhookConfiguration pointing at
    that URL with a CA it generates. Unset: the configuration comes from the Helm chart and the
    certificate from `certfile`/`keyfile` (a Secret mounted into the pod).

    `client_ca`: who may send reviews. A path: a CA bundle; the server then requires a client
    certificate it signed (the API server's, from its admission configuration), and refuses the
    TLS handshake of anything else that reaches the port. "auto": the bundle the local control
    plane publishes in ConfigMap kube-system/stead-webhook-client-ca, when there is one. "off" (or
    "auto" finding none): any client is served, with a warning at start-up: whoever reaches the
    port can then send forged reviews.
    """

    listen: str = "127.0.0.1"
    port: int = 9443
    register_url: str | None = None
    certfile: Path | None = None
    keyfile: Path | None = None
    client_ca: str = "auto"


async def prepare_kopf(
    kube: KubeClient, kinds: Sequence[Kind], admission_services: Services,
    kubeconfig: Path | None, webhook: WebhookOptions | None, stack: contextlib.AsyncExitStack,
    label_buckets: bool = False,
) -> StartKopf:
    """Register every kind's webhooks with a registry of this process's own; return what starts
    Kopf with them. `admission_services` are what admission checks use: their API client has
    connections of its own (see `run_operator`). `label_buckets`: every namespaced kind's
    objects get the bucket label (`operators.runtime.shard`) at creation and update."""
    logging.getLogger("kopf.objects").addFilter(_RefusalsAreNotErrors())
    registry = kopf.OperatorRegistry()
    kopf.on.login(registry=registry)(_login_with(kubeconfig))
    settings = kopf.OperatorSettings()
    client_ca: Path | None = None
    if webhook is not None:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="stead-webhook-")))
        client_ca = await webhook_client_ca(kube, webhook.client_ca, tmp)
        for kind in kinds:
            _register(registry, kind, admission_services, label_buckets, authenticated=client_ca is not None)
    settings.posting.enabled = False  # Stead posts its own Events, one per transition
    settings.peering.standalone = True
    if webhook is not None:
        settings.admission.server, reloader = await _webhook_server(kube, kinds, webhook, tmp, label_buckets,
                                                                    client_ca)
        if reloader is not None:
            task = asyncio.create_task(reloader)
            stack.callback(task.cancel)

    async def start(namespaces: Sequence[str], stop: asyncio.Event | None, ready: asyncio.Event) -> None:
        await kopf.operator(registry=registry, settings=settings, standalone=True, clusterwide=not namespaces,
                            namespaces=list(namespaces), stop_flag=stop, ready_flag=ready)

    return start


class _RefusalsAreNotErrors(logging.Filter):
    """Kopf logs a webhook's refusal as an ERROR ("Webhook ... failed permanently"); for Stead a refused bad
    spec is an answer to the user (who reads it from kubectl), not an operator event: a DEBUG line, kept
    only where DEBUG is (`stead operator -v`). The logger's level was checked for ERROR before this filter
    runs, so a record demoted below the logger's level is dropped here, not passed on to the handlers."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR and record.getMessage().startswith(("Webhook 'validate-",
                                                                               "Webhook 'mutate-")):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)
        return True


def _login_with(kubeconfig: Path | None) -> Callable[..., kopf.ConnectionInfo]:
    """Kopf logs in exactly as Stead's own client does (same kubeconfig, or in-cluster)."""

    def login(**_: Any) -> kopf.ConnectionInfo:
        cfg = load_configuration(kubeconfig)
        return kopf.ConnectionInfo(
            server=cfg.host,
            ca_path=cfg.ssl_ca_cert,
            insecure=not cfg.verify_ssl,
            certificate_path=cfg.cert_file,
            private_key_path=cfg.key_file,
            token=bearer_token(cfg),
        )

    return login


def labels_buckets(kind: Kind, label_buckets: bool) -> bool:
    """Whether the kind's objects get the bucket label (cluster-scoped kinds are watched whole)."""
    return label_buckets and not kind.cluster_scoped


def _register(registry: kopf.OperatorRegistry, kind: Kind, services: Services, label_buckets: bool,
              authenticated: bool) -> None:
    labelled = labels_buckets(kind, label_buckets)

    def request(body: kopf.Body, dryrun: bool, extra: dict[str, Any]) -> AdmissionRequest:
        meta = body.get("metadata") or {}
        old = extra.get("old")
        return AdmissionRequest(
            operation=str(extra.get("operation") or ""), namespace=str(meta.get("namespace") or ""),
            name=str(meta.get("name") or meta.get("generateName") or ""), labels=dict(meta.get("labels") or {}),
            annotations=dict(meta.get("annotations") or {}),
            spec=dict(body.get("spec") or {}),
            old=dict(old) if old else None, dry_run=dryrun, services=services,
            generated_name=not meta.get("name"), authenticated=authenticated,
        )

    if kind.validates:
        @kopf.on.validate(GROUP, VERSION, kind.plural, registry=registry, id=handler_id(kind),
                          operations=validated_operations(kind))
        async def validate(body: kopf.Body, dryrun: bool, **extra: Any) -> None:
            # on DELETE `body` is the object being deleted: its spec is not checked, only `admission` decides
            problems = kind.check_spec(body.get("spec") or {}) if extra.get("operation") != "DELETE" else []
            if problems:
                raise kopf.AdmissionError("; ".join(problems), code=422)
            if kind.admission is not None:
                try:
                    await kind.admission(request(body, dryrun, extra))
                except Refusal as refusal:
                    raise kopf.AdmissionError(refusal.message, code=refusal.code) from None

    if kind.mutates or labelled:
        @kopf.on.mutate(GROUP, VERSION, kind.plural, registry=registry, id=mutating_handler_id(kind),
                        operations=["CREATE", "UPDATE"], side_effects=True)
        async def mutate(body: kopf.Body, dryrun: bool, patch: kopf.Patch, **extra: Any) -> None:
            changes: dict[str, Any] = {}
            if kind.mutation is not None:
                try:
                    changes = dict(await kind.mutation(request(body, dryrun, extra)) or {})
                except Refusal as refusal:
                    raise kopf.AdmissionError(refusal.message, code=refusal.code) from None
            meta = body.get("metadata") or {}
            finalizers = list(meta.get("finalizers") or [])
            if kind.cleanup is not None and FINALIZER not in finalizers and extra.get("operation") == "CREATE":
                # Held from the object's first moment, at the cost of no PATCH of its own.
                changes["metadata"] = {**changes.get("metadata", {}), "finalizers": [*finalizers, FINALIZER]}
            if labelled:  # whatever a user set: the label is a function of the project, which may have changed
                labels = {**(meta.get("labels") or {}), **(changes.get("metadata", {}).get("labels") or {})}
                value = bucket_label(labels, str(meta.get("namespace") or ""))
                if labels.get(BUCKET_LABEL) != value:
                    added = {**(changes.get("metadata", {}).get("labels") or {}), BUCKET_LABEL: value}
                    changes["metadata"] = {**changes.get("metadata", {}), "labels": added}
            for key, value in changes.items():
                patch[key] = value


WEBHOOK_CLIENT_CA_CONFIGMAP = "stead-webhook-client-ca"
"""Where the local control plane publishes its API server's webhook client CA (kube-system, `ca.crt`)."""


async def webhook_client_ca(kube: Requester, setting: str, tmp: Path) -> Path | None:
    """The CA bundle that signs the API server's webhook client certificate, as a file; None: off.

    "auto" reads the local control plane's ConfigMap; a cluster without it (or one where the
    operator may not read kube-system) gets None, with a warning, like "off".
    """
    if setting == "off":
        log.warning("admission webhooks: client certificates are not checked (--webhook-client-ca off): "
                    "anything that reaches the webhook port can send forged admission reviews")
        return None
    if setting != "auto":
        return Path(setting)  # a missing or unreadable file fails the start-up, naming it
    try:
        found = await kube.request("GET", f"/api/v1/namespaces/kube-system/configmaps/{WEBHOOK_CLIENT_CA_CONFIGMAP}")
    except ApiError as error:
        if error.status not in (403, 404):
            raise
        log.warning("admission webhooks: no webhook client CA found (ConfigMap kube-system/%s: %s), client "
                    "certificates are not checked: anything that reaches the webhook port can send forged "
                    "admission reviews; set --webhook-client-ca", WEBHOOK_CLIENT_CA_CONFIGMAP, error.status)
        return None
    pem = str((found.get("data") or {}).get("ca.crt") or "")
    if "BEGIN CERTIFICATE" not in pem:
        raise ValueError(f"ConfigMap kube-system/{WEBHOOK_CLIENT_CA_CONFIGMAP}: data.ca.crt holds no certificate")
    path = tmp / "client-ca.crt"
    path.write_text(pem)
    return path


def _require_client_certificates(context: ssl.SSLContext, client_ca: Path | None) -> None:
    """Only a client with a certificate of `client_ca` completes the handshake (None: any client)."""
    if client_ca is not None:
        context.load_verify_locations(cafile=str(client_ca))
        context.verify_mode = ssl.CERT_REQUIRED


async def _webhook_server(
    kube: KubeClient, kinds: Sequence[Kind], opts: WebhookOptions, tmp: Path, label_buckets: bool,
    client_ca: Path | None,
) -> tuple[kopf.WebhookServer, Coroutine[Any, Any, None] | None]:
    """The webhook server, and for mounted certificates the coroutine that reloads them."""
    if opts.register_url is None:
        if opts.certfile is None or opts.keyfile is None:
            raise ValueError("a mounted webhook certificate needs certfile and keyfile")
        context = server_context(opts.certfile, opts.keyfile)
        _require_client_certificates(context, client_ca)
        # the files too: without them Kopf would try to make a self-signed certificate of its own
        # (and fail: its `certbuilder` is not installed), whatever the context holds
        server = kopf.WebhookServer(addr=opts.listen, port=opts.port, context=context, certfile=opts.certfile,
                                    pkeyfile=opts.keyfile)
        return server, reload_certificate(context, opts.certfile, opts.keyfile)
    ca = make_ca("stead-webhook-ca")
    host = opts.register_url.split("://", 1)[-1].split("/", 1)[0].rsplit(":", 1)[0]
    leaf: KeyPair = make_leaf(ca, "stead-webhook", hosts=[host, "localhost"])
    (tmp / "tls.crt").write_bytes(leaf.cert_pem)
    write_private(tmp / "tls.key", leaf.key_pem)
    api = "/apis/admissionregistration.k8s.io/v1"
    config = validating_configuration(kinds, opts.register_url, ca.cert_pem)
    await kube.apply(f"{api}/validatingwebhookconfigurations/{WEBHOOK_CONFIGURATION}", config)
    mutating = mutating_configuration(kinds, opts.register_url, ca.cert_pem,
                                      also=lambda kind: labels_buckets(kind, label_buckets))
    if mutating is not None:
        await kube.apply(f"{api}/mutatingwebhookconfigurations/{MUTATING_CONFIGURATION}", mutating)
    context = server_context(tmp / "tls.crt", tmp / "tls.key")
    _require_client_certificates(context, client_ca)
    server = kopf.WebhookServer(addr=opts.listen, port=opts.port, context=context, certfile=tmp / "tls.crt",
                                pkeyfile=tmp / "tls.key")
    return server, None
