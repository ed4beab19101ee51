"""The operator process: Kopf watches and serves webhooks; Stead's runtime does the rest.

Handlers here are deliberately thin. Each kind gets one low-level `on.event` handler, which
passes the event to its `Reconciler`; a validating webhook only if the kind has checks its CRD
schema cannot express; a mutating one only if it mutates or holds a finalizer. Low-level
handlers are chosen over Kopf's `on.create/update/resume`: those keep per-handler progress in
annotations and a finalizer on every object, which costs several PATCHes per object, where
Stead's budget is one per visible transition.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import tempfile
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kopf

from operators import GROUP, VERSION
from operators.runtime.addons import Addon
from operators.runtime.admission import (
    MUTATING_CONFIGURATION,
    WEBHOOK_CONFIGURATION,
    handler_id,
    mutating_configuration,
    mutating_handler_id,
    validating_configuration,
)
from operators.runtime.certs import KeyPair, make_ca, make_leaf
from operators.runtime.crdgen import crd_for
from operators.runtime.eventloop import freeze_startup_objects
from operators.runtime.events import EventRecorder
from operators.runtime.kinds import FINALIZER, AdmissionRequest, Kind, Refusal
from operators.runtime.kube import ApiError, KubeClient, bearer_token, load_access, load_configuration
from operators.runtime.metrics import HealthServer, Metrics
from operators.runtime.reconciler import Reconciler
from operators.runtime.ring import Ownership, StaticMembership
from operators.runtime.runs import RunSettings
from operators.runtime.services import Services
from operators.runtime.store import LocalStore
from operators.runtime.tls import reload_certificate, server_context, write_private
from operators.runtime.vault import SecretClusterCopy, Vault, load_or_create_master_key

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WebhookOptions:
    """Where the admission webhook server listens and how the API server reaches it.

    `register_url` set: local mode, Stead registers a ValidatingWebhookConfiguration pointing at
    that URL with a CA it generates. Unset: the configuration comes from the Helm chart and the
    certificate from `certfile`/`keyfile` (a Secret mounted into the pod).
    """

    listen: str = "127.0.0.1"
    port: int = 9443
    register_url: str | None = None
    certfile: Path | None = None
    keyfile: Path | None = None


@dataclass(frozen=True)
class OperatorOptions:
    store_path: Path
    replica: str = "stead-0"
    namespace: str = "stead-system"  # the operator's own: its vault key and ciphertext Secrets live here
    kubeconfig: Path | None = None
    namespaces: Sequence[str] = ()
    install_crds: bool = False
    webhook: WebhookOptions | None = None
    health_listen: str = "127.0.0.1"
    health_port: int = 8080
    runs: RunSettings | None = None
    """How workflow runs are started (`Services.runs`); default: state beside the store, defaults."""


async def run_operator(
    kinds: Sequence[Kind], options: OperatorOptions, stop: asyncio.Event | None = None, addons: Sequence[Addon] = ()
) -> None:
    """Run until `stop` is set (or the process is signalled); cleans up what it started, in reverse."""
    logging.getLogger("kopf.objects").addFilter(_RefusalsAreNotErrors())
    async with contextlib.AsyncExitStack() as stack:
        metrics = Metrics()
        store = LocalStore(options.store_path)
        stack.callback(store.close)
        kube = await stack.enter_async_context(KubeClient(load_access(options.kubeconfig)))
        if options.install_crds:
            await install_crds(kube, kinds)
        recorder = EventRecorder(kube, metrics, options.replica)
        vault = await open_vault(kube, store, options.namespace)
        services = Services(kube=kube, store=store, events=recorder, replica=options.replica, vault=vault,
                            runs=options.runs or RunSettings.beside(options.store_path), metrics=metrics)
        ownership = Ownership(options.replica, StaticMembership([options.replica]))
        reconcilers = [
            Reconciler(kind, store=store, ownership=ownership, writer=kube, events=recorder, metrics=metrics,
                       services=services)
            for kind in kinds
        ]
        _link_dependents(reconcilers)
        for reconciler in reconcilers:
            stack.push_async_callback(reconciler.close)
            swept = reconciler.sweep(await kube.list(reconciler.kind.plural))  # deleted while we were away
            if swept:
                log.info("dropped %d stale %s store entries", swept, reconciler.kind.kind)
        registry = kopf.OperatorRegistry()
        kopf.on.login(registry=registry)(_login_with(options.kubeconfig))
        for reconciler in reconcilers:
            _register(registry, reconciler, services, webhooks=options.webhook is not None)
        settings = kopf.OperatorSettings()
        settings.posting.enabled = False  # Stead posts its own Events, one per transition
        settings.peering.standalone = True
        if options.webhook is not None:
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="stead-webhook-")))
            settings.admission.server, reloader = await _webhook_server(kube, kinds, options.webhook, tmp)
            if reloader is not None:
                _background(stack, reloader)
        health = HealthServer(metrics, options.health_listen, options.health_port)
        await health.start()
        stack.push_async_callback(health.stop)
        for addon in addons:
            await addon.start(services)
            stack.push_async_callback(addon.stop)
        _background(stack, recorder.run())
        stack.push_async_callback(recorder.drain)  # runs before the poster is cancelled
        ready = asyncio.Event()
        _background(stack, _become_ready(ready, health, options.webhook))
        freeze_startup_objects()
        await kopf.operator(
            registry=registry,
            settings=settings,
            standalone=True,
            clusterwide=not options.namespaces,
            namespaces=list(options.namespaces),
            stop_flag=stop,
            ready_flag=ready,
        )


def _link_dependents(reconcilers: Sequence[Reconciler]) -> None:
    """When an object becomes Ready, stops being Ready or goes, the objects of other kinds that
    refer to it (`Kind.depends_on`) are checked again."""
    dependents = [r for r in reconcilers if r.kind.depends_on]
    if not dependents:
        return

    async def notify(kind: str, namespace: str, name: str) -> None:
        for dependent in dependents:
            await dependent.recheck_referrers(kind, namespace, name)

    for reconciler in reconcilers:
        if any(reconciler.kind.kind in d.kind.depends_on for d in dependents):
            reconciler.on_ready_change = notify


def _background(stack: contextlib.AsyncExitStack, coroutine: Coroutine[Any, Any, None]) -> None:
    """A task that lives as long as the operator and is cancelled when it stops."""
    task = asyncio.create_task(coroutine)
    stack.callback(task.cancel)


class _RefusalsAreNotErrors(logging.Filter):
    """Kopf logs a webhook's refusal as an ERROR; for Stead a refused bad spec is normal operation."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR and record.getMessage().startswith("Webhook 'validate-"):
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


async def open_vault(kube: KubeClient, store: LocalStore, namespace: str) -> Vault:
    """The vault with its master key, and every project's secrets recovered from the cluster copy.

    Recovery at start-up is what makes a lost volume (or a project moving to this replica)
    lose no secret: the LMDB copy is the fast path, the per-project Secrets the durable one.
    """
    try:
        await kube.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                          "metadata": {"name": namespace}})
    except ApiError as error:
        if error.status not in (403, 409):  # exists, or we may not create namespaces (a chart made it)
            raise
    copy = SecretClusterCopy(kube, namespace)
    vault = Vault(store, await load_or_create_master_key(kube, namespace), copy)
    for project in await copy.projects():
        recovery = await vault.recover(project)
        if recovery.refused:
            log.warning("vault: %d secrets of project %s could not be decrypted", len(recovery.refused), project)
    return vault


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


def _register(registry: kopf.OperatorRegistry, reconciler: Reconciler, services: Services, webhooks: bool) -> None:
    kind = reconciler.kind

    @kopf.on.event(GROUP, VERSION, kind.plural, registry=registry, id=f"reconcile-{kind.plural}")
    async def on_event(event: kopf.RawEvent, body: kopf.Body, **_: Any) -> None:
        await reconciler.on_event(event.get("type"), body)

    if not webhooks:
        return

    def request(body: kopf.Body, dryrun: bool, extra: dict[str, Any]) -> AdmissionRequest:
        meta = body.get("metadata") or {}
        old = extra.get("old")
        return AdmissionRequest(
            operation=str(extra.get("operation") or ""), namespace=str(meta.get("namespace") or ""),
            name=str(meta.get("name") or meta.get("generateName") or ""), labels=dict(meta.get("labels") or {}),
            annotations=dict(meta.get("annotations") or {}),
            spec=dict(body.get("spec") or {}),
            old=dict(old) if old else None, dry_run=dryrun, services=services,
            generated_name=not meta.get("name"),
        )

    if kind.validates:
        @kopf.on.validate(GROUP, VERSION, kind.plural, registry=registry, id=handler_id(kind),
                          operations=["CREATE", "UPDATE"])
        async def validate(body: kopf.Body, dryrun: bool, **extra: Any) -> None:
            problems = kind.check_spec(body.get("spec") or {})
            if problems:
                raise kopf.AdmissionError("; ".join(problems), code=422)
            if kind.admission is not None:
                try:
                    await kind.admission(request(body, dryrun, extra))
                except Refusal as refusal:
                    raise kopf.AdmissionError(refusal.message, code=refusal.code) from None

    if kind.mutates:
        @kopf.on.mutate(GROUP, VERSION, kind.plural, registry=registry, id=mutating_handler_id(kind),
                        operations=["CREATE", "UPDATE"], side_effects=True)
        async def mutate(body: kopf.Body, dryrun: bool, patch: kopf.Patch, **extra: Any) -> None:
            changes: dict[str, Any] = {}
            if kind.mutation is not None:
                try:
                    changes = dict(await kind.mutation(request(body, dryrun, extra)) or {})
                except Refusal as refusal:
                    raise kopf.AdmissionError(refusal.message, code=refusal.code) from None
            finalizers = list((body.get("metadata") or {}).get("finalizers") or [])
            if kind.cleanup is not None and FINALIZER not in finalizers and extra.get("operation") == "CREATE":
                # Held from the object's first moment, at the cost of no PATCH of its own.
                changes["metadata"] = {**changes.get("metadata", {}), "finalizers": [*finalizers, FINALIZER]}
            for key, value in changes.items():
                patch[key] = value


async def install_crds(kube: KubeClient, kinds: Sequence[Kind], wait_seconds: float = 30.0) -> None:
    """Server-side apply each kind's CRD and wait (bounded) until the API server serves it."""
    for kind in kinds:
        path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{kind.crd_name}"
        await kube.apply(path, crd_for(kind))
    deadline = time.monotonic() + wait_seconds
    for kind in kinds:
        path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{kind.crd_name}"
        while True:
            conds = (await kube.request("GET", path)).get("status", {}).get("conditions") or []
            if any(c.get("type") == "Established" and c.get("status") == "True" for c in conds):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRD {kind.crd_name} not established after {wait_seconds:.0f}s")
            await asyncio.sleep(0.2)


async def _webhook_server(
    kube: KubeClient, kinds: Sequence[Kind], opts: WebhookOptions, tmp: Path
) -> tuple[kopf.WebhookServer, Coroutine[Any, Any, None] | None]:
    """The webhook server, and for mounted certificates the coroutine that reloads them."""
    if opts.register_url is None:
        if opts.certfile is None or opts.keyfile is None:
            raise ValueError("a mounted webhook certificate needs certfile and keyfile")
        context = server_context(opts.certfile, opts.keyfile)
        server = kopf.WebhookServer(addr=opts.listen, port=opts.port, context=context)
        return server, reload_certificate(context, opts.certfile, opts.keyfile)
    ca = make_ca("stead-webhook-ca")
    host = opts.register_url.split("://", 1)[-1].split("/", 1)[0].rsplit(":", 1)[0]
    leaf: KeyPair = make_leaf(ca, "stead-webhook", hosts=[host, "localhost"])
    (tmp / "tls.crt").write_bytes(leaf.cert_pem)
    write_private(tmp / "tls.key", leaf.key_pem)
    api = "/apis/admissionregistration.k8s.io/v1"
    config = validating_configuration(kinds, opts.register_url, ca.cert_pem)
    await kube.apply(f"{api}/validatingwebhookconfigurations/{WEBHOOK_CONFIGURATION}", config)
    mutating = mutating_configuration(kinds, opts.register_url, ca.cert_pem)
    if mutating is not None:
        await kube.apply(f"{api}/mutatingwebhookconfigurations/{MUTATING_CONFIGURATION}", mutating)
    server = kopf.WebhookServer(addr=opts.listen, port=opts.port, certfile=tmp / "tls.crt", pkeyfile=tmp / "tls.key")
    return server, None


async def _become_ready(ready: asyncio.Event, health: HealthServer, webhook: WebhookOptions | None) -> None:
    """Ready once Kopf has started and, with webhooks, once their port accepts connections."""
    await ready.wait()
    while webhook is not None:
        with contextlib.suppress(OSError):
            _, writer = await asyncio.open_connection(webhook.listen, webhook.port)
            writer.close()
            break
        await asyncio.sleep(0.1)
    health.ready = True
    log.info("stead operator ready")


__all__ = ["ApiError", "OperatorOptions", "WebhookOptions", "install_crds", "run_operator"]
