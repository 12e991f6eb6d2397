"""How a step gets its StepContext: injected by the LocalEngine, or built from the config file in a pod."""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, NoReturn

from healer.core.pod_contract import CONFIG_PATH
from healer.edges.alerts import PodMarker
from healer.settings import Settings, load_settings
from workflows.plan import ReplicaTarget, replica_targets
from workflows.steps.base import StepContext
from workflows.steps.per_pod import per_pod, with_sidecars

DEFAULT_CONFIG = CONFIG_PATH  # mounted from a ConfigMap in the healer image's pods
DEFAULT_OUTPUT_DIR = "/tmp/healer-outputs"  # noqa: S108 - Argo reads output parameters from files in the pod
WORKFLOW_NAME_ENV = "HEALER_WORKFLOW_NAME"  # set to {{workflow.name}} in the rendered templates

_current: contextvars.ContextVar[StepContext | None] = contextvars.ContextVar("healer_step_context", default=None)
_output_dir: contextvars.ContextVar[Path | None] = contextvars.ContextVar("healer_output_dir", default=None)


@contextlib.contextmanager
def using(context: StepContext, output_dir: Path) -> Iterator[None]:
    """Run steps in this thread with an injected context (the LocalEngine's way)."""
    token = _current.set(context)
    out_token = _output_dir.set(output_dir)
    try:
        yield
    finally:
        _current.reset(token)
        _output_dir.reset(out_token)


def current() -> StepContext:
    injected = _current.get()
    if injected is not None:
        return injected
    return context_from_settings(load_settings(os.environ.get("HEALER_CONFIG", DEFAULT_CONFIG)))


def output_dir() -> Path:
    return _output_dir.get() or Path(os.environ.get("HEALER_OUTPUT_DIR", DEFAULT_OUTPUT_DIR))


def step_settings() -> Settings:
    """healer.yaml as a step pod has it mounted ($HEALER_CONFIG)."""
    return load_settings(os.environ.get("HEALER_CONFIG", DEFAULT_CONFIG))


TERMINATION_LOG = "termination-log"


def write_outputs(values: Mapping[str, Any], directory: Path | None = None) -> None:
    """A step's output parameters: one file each in the output folder, where Argo (or the LocalEngine)
    reads them; a value that is not a string is written as JSON."""
    directory = directory or output_dir()
    directory.mkdir(parents=True, exist_ok=True)
    for name, value in values.items():
        (directory / name).write_text(value if isinstance(value, str) else json.dumps(value, sort_keys=True))


def termination_message(text: str) -> None:
    """Why the step failed, in one line. In a pod Kubernetes shows /dev/termination-log as the container's
    message and Argo as the node's; the LocalEngine reads the copy in the output directory."""
    write_outputs({TERMINATION_LOG: text[:4000]})
    path = Path("/dev/termination-log")
    if path.exists():
        # Not writable outside a pod: the message is on stdout as well.
        with contextlib.suppress(OSError):
            path.write_text(text[:4000])


def fail_step(message: str) -> NoReturn:
    """Fail the step's node with a one-line message (Argo shows the termination message as the node's)."""
    termination_message(message)
    print(message)
    raise SystemExit(1)


def context_from_settings(settings: Settings) -> StepContext:
    from healer.edges.store import store_from_settings
    from healer.edges.triton import TritonHttp

    if settings.store is None:
        raise ValueError(f"{settings.source}: store: is required to roll back")
    # None only when Triton reads an S3 store itself (object-store); the loader requires it otherwise.
    # per-pod: the replicas' repositories are theirs alone (each sidecar stages into its own); in the sidecar,
    # live_repository is its pod's, which a rollback never writes directly: none here.
    live = None if per_pod(settings) else settings.live_repository_path
    return StepContext(
        settings=settings,
        triton=TritonHttp(settings.triton.url, timeout_s=settings.triton.timeout_s),
        store=store_from_settings(settings.store),
        live_repository=live,
        mark_pod=_pod_marker(),
        list_replicas=replica_lister(settings),
        workflow_name=os.environ.get(WORKFLOW_NAME_ENV, ""),  # Argo's pods; the LocalEngine sets it itself
    )


def replica_lister(settings: Settings) -> Callable[[], list[ReplicaTarget]] | None:
    """Every Triton the rollback must heal (rollback.replicas), with those to skip, listed when needed:
    the pods of a selector through the Kubernetes API, or the addresses as written. None: unset."""
    replicas = settings.rollback.replicas
    if replicas is None:
        return None
    query = replicas.pod_query
    if query is None:
        # A fixed list: nothing to ask; whether each Triton answers is checked right before it is acted on.
        # Each with the sidecar named beside it, or the one on its host (per-pod mode stages through it).
        fixed = with_sidecars(
            settings,
            [ReplicaTarget(a, sidecar=replicas.sidecar_of(i)) for i, a in enumerate(replicas.addresses)],
            kubernetes=False,
        )
        return lambda: list(fixed)
    namespace, selector = query

    def list_replicas() -> list[ReplicaTarget]:
        from healer.edges import kube

        client = kube.KubeClient.in_cluster()
        # Each pod's sidecar: its IP, the injected sidecar's port (healer/core/pod_contract.py).
        return with_sidecars(
            settings, replica_targets(client.triton_pods(namespace, selector), replicas.port), kubernetes=True
        )

    return list_replicas


def _pod_marker() -> PodMarker | None:
    """Annotate the detecting pod for diagnosis when running inside a cluster; None elsewhere."""
    from healer.edges import kube

    if not kube.in_cluster():
        return None
    try:
        client = kube.KubeClient.in_cluster()
    except Exception as exc:  # no service-account token mounted: escalate without the annotation
        import structlog

        structlog.get_logger(__name__).warning("kubernetes_unavailable", error=str(exc))
        return None
    namespace = kube.default_namespace()

    def mark(pod: str, annotations: Mapping[str, str]) -> None:
        client.annotate_pod(kube.PodRef.parse(pod, default_namespace=namespace), annotations)

    return mark
