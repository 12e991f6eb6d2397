"""healer's configuration: one YAML file, read once at the edge into frozen, typed settings.

Each key is declared once, on the dataclass field that holds it (``Setting``: its documentation and
bounds; the field: its name, type and default). The loader reads every section by those declarations;
the configuration reference (docs/configuration.md) and the Helm chart's values.schema.json are
generated from them (``python -m healer.settings.reference``).

Every error names the file, the key path and what is wrong, e.g.
``examples/bad.yaml: models[1].golden.outputs[0].atol: must be >= 0, got -1``.
Unknown keys are rejected so a typo never silently falls back to a default; a deprecated key is
accepted with a warning and ignored.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import MISSING, dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar, TypeVar

import numpy as np
import numpy.typing as npt
import structlog
import yaml

log = structlog.get_logger(__name__)

# Model names and versions become file paths, S3 keys and URL segments: keep them boring.
MODEL_NAME_PATTERN = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}\Z")
# Triton's version directories are positive integers.
VERSION_PATTERN = re.compile(r"^[1-9][0-9]{0,18}\Z")
# The version a rollback names when the failing one was never seen (a model failing before any version
# answered, healer/core/state.py): it is healed, but it is no Triton version (no files move for it).
UNKNOWN_VERSION = "unknown"

# KServe v2 / Triton datatypes and the numpy dtype each one travels as.
DATATYPES: Mapping[str, npt.DTypeLike] = {
    "BOOL": np.bool_,
    "UINT8": np.uint8,
    "UINT16": np.uint16,
    "UINT32": np.uint32,
    "UINT64": np.uint64,
    "INT8": np.int8,
    "INT16": np.int16,
    "INT32": np.int32,
    "INT64": np.int64,
    "FP16": np.float16,
    "FP32": np.float32,
    "FP64": np.float64,
    "BYTES": np.object_,
}


class ConfigError(ValueError):
    """The configuration file is unusable; the message says where and why."""

    def __init__(self, source: str, key_path: str, problem: str) -> None:
        self.source = source
        self.key_path = key_path
        self.problem = problem
        where = f"{source}: {key_path}" if key_path else source
        super().__init__(f"{where}: {problem}")


# ---- the declaration: each key of healer.yaml is one dataclass field below --------------------------

SETTING = "healer.setting"  # the dataclass field metadata key a Setting is stored under

# Kinds of text a string setting can be, beyond "a non-empty string": each is checked by one function
# below (_read_form), described once in the reference and in the chart's schema (healer/settings/reference.py).
FORMS = ("address", "url", "version", "model-name", "set-name")


@dataclass(frozen=True)
class Setting:
    """One key of healer.yaml, declared on the dataclass field that holds it:
    ``timeout_s: float = field(default=2.0, metadata=setting("...", minimum=0.001))``.

    The field gives the key's name, type and default; this gives the rest. The loader's checks (unknown
    keys, types, bounds), the configuration reference (docs/configuration.md) and the chart's
    values.schema.json are all made from these declarations. Rules that tie several keys together
    (exactly one of two keys, a timeout within the deadline) are code, in the section's ``_BUILD`` step.
    """

    doc: str  # one line: what the key does
    minimum: float | None = None  # numbers and integers (a list's items: its items)
    maximum: float | None = None
    above_maximum: str | None = None  # the problem above ``maximum``, when "must be <= max" says too little
    choices: tuple[str, ...] = ()  # strings: the only values allowed
    form: str | None = None  # strings: one of FORMS
    key: str | None = None  # its name in the file, when not the field's
    blank_is_default: bool = False  # null or "" means the default (older files and charts write them)
    min_items: int = 0  # lists
    under: str | None = None  # the value is written as a mapping with this one key ({root: /models})
    inline: bool = False  # a section whose keys sit in the parent's mapping (an output's tensor keys)
    alternatives: tuple[tuple[str, type, str], ...] = ()  # (key, type, doc): read by the section's _BUILD step
    default_doc: str | None = None  # the default in words, where it is not one value


def setting(
    doc: str,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    above_maximum: str | None = None,
    choices: tuple[str, ...] = (),
    form: str | None = None,
    key: str | None = None,
    blank_is_default: bool = False,
    min_items: int = 0,
    under: str | None = None,
    inline: bool = False,
    alternatives: tuple[tuple[str, type, str], ...] = (),
    default_doc: str | None = None,
) -> dict[str, Setting]:
    """A settings field's metadata: ``field(default=..., metadata=setting("one line of doc", ...))``."""
    if form is not None and form not in FORMS:
        raise ValueError(f"unknown form {form!r}")
    return {
        SETTING: Setting(
            doc,
            minimum=minimum,
            maximum=maximum,
            above_maximum=above_maximum,
            choices=choices,
            form=form,
            key=key,
            blank_is_default=blank_is_default,
            min_items=min_items,
            under=under,
            inline=inline,
            alternatives=alternatives,
            default_doc=default_doc,
        )
    }


@dataclass(frozen=True)
class TritonSettings:
    """Where the Triton server's HTTP endpoint is and how long a probe may wait for it."""

    url: str = field(
        default="127.0.0.1:8000", metadata=setting("Triton's HTTP endpoint (no scheme, no path)", form="address")
    )
    timeout_s: float = field(
        default=2.0, metadata=setting("connect + read timeout of the liveness and readiness calls", minimum=0.001)
    )


@dataclass(frozen=True)
class EmbeddedSettings:
    """The embedded default: a real tritonserver started by healer on this machine."""

    model_repository: Path = field(metadata=setting("the model repository the embedded Triton serves"))
    startup_timeout_s: float = field(
        default=60.0, metadata=setting("how long the embedded Triton may take to become ready", minimum=1)
    )
    tritonserver: Path | None = field(
        default=None,
        metadata=setting("the tritonserver binary", default_doc="$TRITONSERVER, then the nvidia-pytriton wheel's"),
    )


@dataclass(frozen=True, eq=False)
class TensorSpec:
    """One golden input or expected output: name, datatype, shape and values."""

    name: str = field(metadata=setting("the tensor's name, unique within the request's inputs or outputs"))
    datatype: str = field(metadata=setting("its KServe v2 / Triton datatype", choices=tuple(DATATYPES)))
    shape: tuple[int, ...] = field(metadata=setting("its shape", minimum=0, min_items=1))
    values: npt.NDArray[Any] = field(
        metadata=setting(
            "exactly one of data or file; the values must fit the datatype without loss",
            alternatives=(
                ("data", object, 'the values inline, nested as the shape (NaN/Inf: .nan, .inf or "nan", "inf")'),
                ("file", Path, "a .npy or .json file holding them"),
            ),
        )
    )


@dataclass(frozen=True, eq=False)
class ExpectedOutput:
    tensor: TensorSpec = field(metadata=setting("the expected tensor", inline=True))
    atol: float = field(
        default=1e-6,
        metadata=setting(
            "absolute tolerance: pass when |actual - expected| <= atol + rtol * |expected|",
            minimum=0,
            default_doc="1e-06; 0 for BOOL, integer and BYTES outputs (they compare exactly)",
        ),
    )
    rtol: float = field(
        default=1e-5,
        metadata=setting(
            "relative tolerance (see atol)",
            minimum=0,
            default_doc="1e-05; 0 for BOOL, integer and BYTES outputs (they compare exactly)",
        ),
    )


@dataclass(frozen=True, eq=False)
class GoldenRequest:
    """A request with a known answer: the business tier's evidence that a model is right."""

    inputs: tuple[TensorSpec, ...] = field(metadata=setting("the request's input tensors", min_items=1))
    outputs: tuple[ExpectedOutput, ...] = field(
        metadata=setting("the expected output tensors, matched by name; datatype and shape must match", min_items=1)
    )
    latency_slo_ms: float = field(
        metadata=setting("a correct answer slower than this fails the business tier", minimum=0.001)
    )
    timeout_s: float = field(
        default=5.0,
        metadata=setting(
            "no answer within this fails the probe; at least the latency SLO, and a small multiple of it "
            "(a hang is detected in failure_threshold x timeout_s)",
            minimum=0.001,
        ),
    )
    input_hash: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "input_hash", hash_inputs(self.inputs))


@dataclass(frozen=True, eq=False)
class ModelSettings:
    name: str = field(metadata=setting("the model's name in Triton, unique in the file", form="model-name"))
    golden: GoldenRequest = field(metadata=setting("the request with a known answer the business tier sends"))
    # None: probe every version Triton currently serves (follows rollbacks).
    version: str | None = field(
        default=None,
        metadata=setting(
            "pin one version", form="version", default_doc="every version Triton serves now (follows rollbacks)"
        ),
    )
    # A required model failing, healing or escalated makes the pod not ready (drains it).
    required: bool = field(
        default=True, metadata=setting("whether this model failing, healing or escalated makes the pod not ready")
    )


@dataclass(frozen=True)
class S3Settings:
    bucket: str = field(metadata=setting("the bucket holding every version healer can restore and its ledger"))
    prefix: str = field(
        default="",
        metadata=setting("a key prefix inside the bucket (slashes at either end dropped)", blank_is_default=True),
    )
    endpoint_url: str | None = field(
        default=None,
        metadata=setting("the S3 endpoint, for MinIO, SeaweedFS, Ceph...", form="url", default_doc="AWS S3"),
    )  # None: AWS; set for MinIO, SeaweedFS, Ceph...
    region: str = field(default="us-east-1", metadata=setting("the bucket's region"))
    connect_timeout_s: float = field(default=3.0, metadata=setting("S3 connect timeout", minimum=0.001))
    read_timeout_s: float = field(default=10.0, metadata=setting("S3 read timeout", minimum=0.001))
    # Credentials come from the usual AWS_* environment variables or the pod's IAM role, never from this file.


@dataclass(frozen=True)
class StoreSettings:
    """Where model versions and the stable ledger live: a filesystem/NFS path or S3."""

    filesystem: Path | None = field(
        default=None, metadata=setting("a filesystem or NFS store: its root directory", under="root")
    )
    s3: S3Settings | None = field(
        default=None, metadata=setting("an S3 store (credentials: AWS_* variables or the pod's role, never here)")
    )


@dataclass(frozen=True)
class AlertSettings:
    webhook_url: str | None = field(
        default=None,
        metadata=setting(
            "Alertmanager's base URL; alerts go to <url>/api/v2/alerts", form="url", default_doc="no alerts sent"
        ),
    )
    timeout_s: float = field(default=5.0, metadata=setting("timeout of one alert's delivery", minimum=0.001))
    runbook_url: str = field(
        default="https://github.com/healer-dev/healer/blob/main/runbooks/rollback-escalated.md",
        metadata=setting("the runbook an escalation alert links to", form="url"),
    )


@dataclass(frozen=True)
class ArgoSettings:
    host: str = field(default="https://argo-server.argo:2746", metadata=setting("argo-server's URL", form="url"))
    namespace: str = field(
        default="ml",
        metadata=setting("where the healer-rollback WorkflowTemplate is installed: the Triton namespace"),
    )
    token_file: Path | None = field(
        default=None,
        metadata=setting(
            "the bearer token sent to argo-server, e.g. a projected service-account token",
            blank_is_default=True,
            default_doc="no token",
        ),
    )
    verify_ssl: bool = field(default=True, metadata=setting("verify argo-server's TLS certificate"))
    request_timeout_s: float = field(default=5.0, metadata=setting("timeout of one argo-server call", minimum=0.001))
    # The CA that signed argo-server's certificate (Argo's default one is self-signed); None: the
    # system's CAs. Ignored when verify_ssl is false.
    ca_file: Path | None = field(
        default=None,
        metadata=setting(
            "the CA that signed argo-server's certificate (Argo's default one is self-signed); "
            "ignored when verify_ssl is false",
            blank_is_default=True,
            default_doc="the system's CAs",
        ),
    )


@dataclass(frozen=True)
class ReplicaSettings:
    """Every Triton a rollback must heal: the Running pods matching a label selector (Kubernetes API)."""

    namespace: str = field(metadata=setting("the Triton pods' namespace"))
    selector: str = field(metadata=setting("their label selector, e.g. app.kubernetes.io/name=triton"))
    port: int = field(default=8000, metadata=setting("Triton's HTTP port in those pods", minimum=1, maximum=65535))


ROLLBACK_ORDERS = ("swap", "unload-first")
ROLLBACK_ENGINES = ("local", "argo")
# rollback.deadline_s at most: the budget is 90 s by design, and the deadline also sizes the rollback's
# lease (deadline + unload + 2 x load + margin, workflows/steps.py) and its workflow's
# activeDeadlineSeconds. A deadline of hours is a typo or a misunderstanding; it would keep a dead
# rollback's lease, and with it every later rollback of that model, for as long. An hour is generous.
MAX_DEADLINE_S = 3600


@dataclass(frozen=True)
class RollbackSettings:
    deadline_s: float = field(
        default=90.0,
        metadata=setting(
            "the whole rollback, lease to verified on every replica; past it: escalate",
            minimum=1,
            maximum=MAX_DEADLINE_S,
            above_maximum=(
                f"must be at most {MAX_DEADLINE_S} s (a rollback's budget is 90 s by design; its lease and its "
                "workflow last about this long)"
            ),
        ),
    )
    unload_timeout_s: float = field(
        default=30.0, metadata=setting("one replica's unload, at most deadline_s", minimum=0.1)
    )
    load_timeout_s: float = field(default=60.0, metadata=setting("one replica's load, at most deadline_s", minimum=0.1))
    poll_interval_s: float = field(
        default=0.05, metadata=setting("how often a load or unload in progress is checked", minimum=0.001)
    )
    engine: str = field(
        default="local", metadata=setting("where rollbacks run: in this process or on Argo", choices=ROLLBACK_ENGINES)
    )
    # LocalEngine's run records. A relative path resolves against the config file's folder, which
    # in a pod is a read-only ConfigMap: the default is absolute and writable.
    state_dir: Path = field(
        default=Path("/tmp/healer/runs"),  # noqa: S108 - a per-pod scratch directory
        metadata=setting("the LocalEngine's run records (writable)", blank_is_default=True),
    )
    argo: ArgoSettings = field(default_factory=ArgoSettings, metadata=setting("the Argo engine's argo-server"))
    alert: AlertSettings = field(default_factory=AlertSettings, metadata=setting("where an escalation is sent"))
    # None: heal the Triton the request names (the submitting pod's), or triton.url.
    replicas: ReplicaSettings | None = field(
        default=None,
        metadata=setting(
            "heal every replica: the Running pods matching a selector (Kubernetes API)",
            default_doc="the Triton the request names (the submitting pod's), or triton.url",
        ),
    )
    # Restore in waves: one replica first (the canary: if the stable version fails there, nothing else
    # was touched), then waves that start at `parallelism` and double while the store keeps up.
    # Concurrent loads read one shared repository, so more is not always faster:
    # benchmarks/scale_restore.py measures it. From about 74 at once, a 1 GB model on a 10 Gbit/s store
    # runs past load_timeout_s, so the first wave is 50 and each next one grows only when the last
    # one's slowest load took under half of load_timeout_s; 1000 at once made the verifies themselves
    # slow on 2 cores, hence the ceiling (docs/scale.md).
    parallelism: int = field(
        default=50,
        metadata=setting(
            "replicas restored at once in the first wave after the canary (the first replica, restored and "
            "verified alone); the swap order only (unload-first restores one at a time: the model is absent "
            "on each replica it unloads)",
            minimum=1,
        ),
    )
    max_parallelism: int = field(
        default=200,
        metadata=setting(
            "the largest wave: each wave doubles the last while its slowest load took under half of "
            "load_timeout_s (and halves it over three quarters), up to this many at once",
            minimum=1,
        ),
    )
    # swap: load the stable version over the broken one (Triton loads the new version, then releases
    # the old; a failed load keeps the old): the model is never absent. unload-first: for models too
    # large to be resident twice; the model is absent between unload and load.
    order: str = field(
        default="swap",
        metadata=setting(
            "swap: the stable version loaded over the broken one (never absent); unload-first: for models "
            "too large to be resident twice",
            choices=ROLLBACK_ORDERS,
        ),
    )
    # Quarantined and displaced copies pile up in the live repository (each rollback adds one): past
    # this many per model and folder the oldest go, but only a copy the store still holds, never a
    # stable version's, and never when the store is the live repository (the copy is the version then).
    keep_aside: int = field(
        default=5,
        metadata=setting(
            "copies kept per model in <live>/<model>/.healer-quarantine and .healer-displaced (each): older ones "
            "are removed after a rollback, only if the store holds that version too and it is not stable",
            minimum=1,
        ),
    )


# The whole release, staging to promoted, a person's approval included; past it the put-back runs. The
# bake, from release.bake_s or `healer release --bake`, leaves the other half for the loads and a person.
RELEASE_DEADLINE_S = 3600
MAX_BAKE_S = RELEASE_DEADLINE_S // 2


@dataclass(frozen=True)
class ReleaseSettings:
    """`healer release`: a new version on one replica first (the canary), baked, then everywhere."""

    # The canary serves the new version beside the stable one for this long, its golden request
    # checked every check_interval_s, before any other replica gets it.
    bake_s: float = field(
        default=60.0,
        metadata=setting(
            "how long the canary serves the new version (beside the stable one) before the others get it",
            minimum=0,
            maximum=MAX_BAKE_S,
            above_maximum=f"must be at most {MAX_BAKE_S} s (half the release's {RELEASE_DEADLINE_S} s deadline)",
        ),
    )
    check_interval_s: float = field(
        default=2.0,
        metadata=setting("how often the golden request is sent to the canary during the bake", minimum=0.01),
    )
    # Inconclusive checks (Triton did not answer) prove nothing about the version: this many in a row
    # stop the release (every replica back on the stable version) without quarantining the version.
    inconclusive_limit: int = field(
        default=3,
        metadata=setting(
            "this many inconclusive checks in a row stop the release (the version is not quarantined)", minimum=1
        ),
    )


@dataclass(frozen=True)
class TierThresholds:
    failure_threshold: int = field(metadata=setting("results in a row that make the tier fail", minimum=1))
    success_threshold: int = field(metadata=setting("results in a row that make it pass again", minimum=1))


@dataclass(frozen=True)
class DrainPeers:
    """The pods of this sidecar's replica set (Kubernetes API): its own pod among them."""

    namespace: str = field(metadata=setting("the replica set's namespace"))
    selector: str = field(metadata=setting("its pods' label selector, e.g. app.kubernetes.io/name=triton"))


# Names the store uses for itself beside the drain sets (.healer/<name>/).
RESERVED_SET_NAMES = frozenset({"ledger", "audit", "lease"})


@dataclass(frozen=True)
class DrainSettings:
    """Draining never empties the Service (healer/core/decisions.py ``drain_plan``): the pods that drain
    are admitted one at a time through a drain set in the store (compare-and-swap), so at least
    ``min_ready`` pods stay serving. Exactly one peers source (who is Ready, who is terminating):
    ``peers`` (the Kubernetes API) or ``peer_urls`` (the sidecars' base URLs, this one's included)."""

    # Keys older files may still carry: accepted with a warning naming the file and the key, then ignored.
    deprecated_keys: ClassVar[Mapping[str, str]] = MappingProxyType(
        {"settle_s": "no longer used (the drain set orders admissions): remove it"}
    )

    min_ready: int = field(
        default=1, metadata=setting("pods that must stay ready and serving, whatever is broken", minimum=1)
    )
    peers: DrainPeers | None = field(
        default=None, metadata=setting("the replica set's pods, from the Kubernetes API (or peer_urls)")
    )
    peer_urls: tuple[str, ...] = field(
        default=(),
        metadata=setting("the replica set's sidecars' base URLs, this one's included (or peers)", form="url"),
    )
    keep_decision_s: float = field(
        default=60.0, metadata=setting("peers or drain set unreadable: keep a drain this long, then serve", minimum=0)
    )
    timeout_s: float = field(
        default=2.0, metadata=setting("one peer /status read (peer_urls; read in parallel)", minimum=0.001)
    )
    # The drain set's name in the store, shared by the pods of one replica set and by no other set
    # (None: derived from peers' namespace and selector; with peer_urls a file must give it, see
    # _build_drain, and only settings built in code, e.g. a drill's scratch set, fall back to "default").
    set_name: str | None = field(
        default=None,
        metadata=setting(
            "the drain set's name in the store: the same in every pod of the replica set, different in every "
            "other set sharing the store",
            key="set",
            form="set-name",
            default_doc="derived from peers; required with peer_urls",
        ),
    )
    store_timeout_s: float = field(
        default=5.0,
        metadata=setting("the longest one read-decide-write of the drain set may hold the probe loop", minimum=0.01),
    )

    @property
    def drain_set(self) -> str:
        if self.set_name:
            return self.set_name
        if self.peers is not None:
            raw = f"{self.peers.namespace}.{self.peers.selector}"
            name = re.sub(r"[^A-Za-z0-9_.-]|\.\.+", "_", raw).strip("._-")
            if len(name) > 100:
                # Cut: a digest of the whole identity keeps two long selectors that differ only past
                # the cut apart. (Names that fit are kept as they were: a new name would split a set
                # in two during a rolling upgrade.)
                digest = hashlib.sha256(raw.encode()).hexdigest()[:10]
                name = f"{name[:89].rstrip('._-')}-{digest}"
            return name if name and name not in RESERVED_SET_NAMES else "default"
        return "default"


@dataclass(frozen=True)
class SidecarSettings:
    """The probe sidecar. Production default period: 5 s (a detection in ~15 s with threshold 3)."""

    listen: str = field(
        default="0.0.0.0:8088",  # the pod's probes and Prometheus reach it from outside
        metadata=setting("where /livez, /readyz, /metrics and /status listen; not Triton's port", form="address"),
    )
    period_s: float = field(default=5.0, metadata=setting("how often every model is probed", minimum=0.05))
    # Fast confirmation: after a wrong answer, re-probe that model this often (not every period) until
    # business.failure_threshold wrong answers in a row confirm it or a good answer clears it. The rule
    # is unchanged (that many consecutive wrong answers); only the wait between them shrinks. 0: off.
    confirm_interval_s: float = field(
        default=0.2,
        metadata=setting(
            "after a wrong answer, re-probe that model this often until it is confirmed or cleared; "
            "0 (off) or 0.05 to period_s",
            minimum=0,
        ),
    )
    # Each model is probed on its own worker, so a hung model holds one worker for its golden timeout
    # and never the others' probes. Triton does the work; the sidecar's threads only wait on sockets.
    probe_concurrency: int = field(
        default=8,
        metadata=setting("models probed at once against this pod's Triton (1: one after another)", minimum=1),
    )
    readiness: TierThresholds = field(
        default=TierThresholds(failure_threshold=2, success_threshold=1),
        metadata=setting("the readiness tier's thresholds"),
    )
    business: TierThresholds = field(
        default=TierThresholds(failure_threshold=3, success_threshold=2),
        metadata=setting("the business tier's (golden request's) thresholds"),
    )
    max_rollbacks: int = field(
        default=3, metadata=setting("circuit breaker: rollbacks per model per window_s", minimum=1)
    )
    window_s: float = field(default=3600.0, metadata=setting("the circuit breaker's window", minimum=1))
    # If the Argo engine cannot take the rollback within this, run it in the pod (LocalEngine).
    argo_submit_timeout_s: float = field(
        default=5.0, metadata=setting("Argo not taking a rollback within this: run it in the pod", minimum=0.1)
    )
    fallback_to_local: bool = field(
        default=True, metadata=setting("run a rollback in the pod when Argo cannot take it")
    )
    # The longest one engine call (build, submit-or-join, status) may hold the probe loop; past it the
    # call is left to its thread and counted as "maybe delivered" (healer/sidecar.py BoundedCalls).
    engine_call_timeout_s: float = field(
        default=15.0,
        metadata=setting("the longest one engine call (submit, status) may hold the probe loop", minimum=0.01),
    )
    # None: drain on every failing model, as on a single machine; set it for a replica set.
    drain: DrainSettings | None = field(
        default=None,
        metadata=setting(
            "drain a replica set without ever emptying its Service", default_doc="every failing pod drains"
        ),
    )
    # The pod's terminationGracePeriodSeconds: after SIGTERM, an in-pod rollback gets part of it to
    # finish, then is cancelled so that it stops cleanly and its exit handler alerts within it.
    termination_grace_s: float = field(
        default=30.0,
        metadata=setting(
            "the pod's terminationGracePeriodSeconds: an in-pod rollback is cancelled within it", minimum=1
        ),
    )


@dataclass(frozen=True)
class TracingSettings:
    """OpenTelemetry traces, one per incident (docs/tracing.md): the sidecar's decision and submission,
    the rollback's phases and replicas. Off by default: then nothing is imported, made or sent."""

    enabled: bool = field(default=False, metadata=setting("send one OpenTelemetry trace per incident to otlp_endpoint"))
    otlp_endpoint: str | None = field(
        default=None,
        metadata=setting(
            "the OTLP/HTTP traces endpoint of a Collector, Jaeger or Tempo, e.g. http://collector:4318/v1/traces "
            "(headers such as credentials: OTEL_EXPORTER_OTLP_TRACES_HEADERS in the environment, never here)",
            form="url",
            default_doc="none; required when enabled",
        ),
    )
    service_name: str = field(
        default="healer", metadata=setting("the service.name the spans carry (the sidecar's and the steps' alike)")
    )
    timeout_s: float = field(
        default=2.0,
        metadata=setting(
            "timeout of one export; a rollback step waits at most this long for its spans to leave", minimum=0.001
        ),
    )
    ui_link_template: str | None = field(
        default=None,
        metadata=setting(
            "a trace's page in your trace UI, with {trace_id} where its id goes, e.g. "
            "https://jaeger.example.com/trace/{trace_id}: the alerts link to it",
            form="url",
            default_doc="no trace links",
        ),
    )


@dataclass(frozen=True, eq=False)
class Settings:
    source: str  # the file the settings were read from (not a key)
    triton: TritonSettings = field(metadata=setting("the Triton this healer watches"))
    models: tuple[ModelSettings, ...] = field(
        metadata=setting("the models to check, each with its golden request", min_items=1)
    )
    embedded: EmbeddedSettings | None = field(
        default=None, metadata=setting("only for `healer demo`: a real tritonserver on free ports")
    )
    store: StoreSettings | None = field(
        default=None,
        metadata=setting("where versions and the stable ledger live: exactly one of filesystem or s3"),
    )
    # The directory Triton reads (its --model-repository). None: the filesystem store itself.
    live_repository: Path | None = field(
        default=None,
        metadata=setting(
            "the directory Triton reads (its --model-repository); required with an S3 store",
            default_doc="the filesystem store's root",
        ),
    )
    rollback: RollbackSettings = field(default_factory=RollbackSettings, metadata=setting("how a rollback runs"))
    release: ReleaseSettings = field(
        default_factory=ReleaseSettings, metadata=setting("how `healer release` rolls a new version out")
    )
    sidecar: SidecarSettings = field(default_factory=SidecarSettings, metadata=setting("the probe sidecar"))
    tracing: TracingSettings = field(
        default_factory=TracingSettings, metadata=setting("OpenTelemetry traces, one per incident; off by default")
    )

    @property
    def live_repository_path(self) -> Path | None:
        if self.live_repository is not None:
            return self.live_repository
        return self.store.filesystem if self.store is not None else None

    def model(self, name: str) -> ModelSettings:
        for model in self.models:
            if model.name == name:
                return model
        raise KeyError(name)


def hash_inputs(inputs: Sequence[TensorSpec]) -> str:
    """sha256 over the request inputs (name, datatype, shape, values), stable across runs and hosts."""
    digest = hashlib.sha256()
    for tensor in inputs:
        header = json.dumps([tensor.name, tensor.datatype, list(tensor.shape)], separators=(",", ":"))
        digest.update(header.encode())
        if tensor.datatype == "BYTES":
            for item in tensor.values.reshape(-1):
                raw = item if isinstance(item, bytes) else str(item).encode()
                digest.update(len(raw).to_bytes(8, "little") + raw)
        else:
            digest.update(np.ascontiguousarray(tensor.values).astype(tensor.values.dtype.newbyteorder("<")).tobytes())
    return digest.hexdigest()


# ---- addresses and URLs: the one check of every key that holds one ------------------------------------

URL_SCHEMES = ("http://", "https://")
# A Triton on this machine binds every address of its port by default (--http-address 0.0.0.0).
_WILDCARD_HOSTS = frozenset({"0.0.0.0", "::", "*"})  # noqa: S104 - host names compared, nothing bound
_LOOPBACK_HOSTS = frozenset({"localhost", "ip6-localhost", "::1"})
_USERINFO = re.compile(r"^((?:[A-Za-z][A-Za-z0-9+.-]*://)?)[^/?#]*@")


def redact_url(text: str) -> str:
    """``text`` with any ``user:password@`` replaced by ``***@``: what an error or a log may repeat."""
    return _USERINFO.sub(r"\1***@", text)


def parse_address(text: str, *, url: bool) -> tuple[str, int | None]:
    """(host, port) of an address setting; ValueError says what is wrong (never repeating credentials).

    ``url``: an http(s) URL (a path is allowed; no port: the scheme's, None); otherwise ``host:port``
    with no scheme and no path (triton.url, sidecar.listen). Credentials are refused wherever they
    appear: a URL is logged, printed by `healer probe` and shown in /status."""
    shown = redact_url(text)
    if url:
        if not text.startswith(URL_SCHEMES):
            raise ValueError(f"must start with http:// or https://, got {shown!r}")
        authority = re.split(r"[/?#]", text.split("://", 1)[1], maxsplit=1)[0]
    elif "://" in text or "/" in text or ":" not in text:
        raise ValueError(f"must be host:port without a scheme or path, got {shown!r}")
    else:
        authority = text
    if "@" in authority:
        raise ValueError(
            f"must not carry credentials (user:password@): they would be written to logs and output; got {shown!r}"
        )
    host, port = _host_and_port(authority, shown)
    if not host:
        raise ValueError(f"has no host, got {shown!r}")
    if re.search(r"\s", host):
        raise ValueError(f"has a space in its host, got {shown!r}")
    if port is None:
        if not url:
            raise ValueError(f"must be host:port without a scheme or path, got {shown!r}")
        return host, None
    if not re.fullmatch(r"[0-9]{1,5}", port) or not 0 < int(port) < 65536:
        raise ValueError(f"port must be a number from 1 to 65535, got {port!r} in {shown!r}")
    return host, int(port)


def _host_and_port(authority: str, shown: str) -> tuple[str, str | None]:
    """``host[:port]`` or ``[v6][:port]`` split, the port as written (None: none)."""
    if authority.startswith("["):
        end = authority.find("]")
        if end < 0:
            raise ValueError(f"has an unclosed '[' in its host, got {shown!r}")
        host, rest = authority[1:end], authority[end + 1 :]
        if rest and not rest.startswith(":"):
            raise ValueError(f"must have ':port' right after the ']' of an IPv6 address, got {shown!r}")
        port = rest[1:] if rest else None
    else:
        host, colon, port_text = authority.rpartition(":")
        host, port = (host, port_text) if colon else (authority, None)
        if ":" in host:
            raise ValueError(f"must write an IPv6 address in brackets ([::1]:8000), got {shown!r}")
    return host, port


def check_listen(settings: Settings, listen: str | None = None) -> None:
    """ValueError unless the sidecar can listen at ``listen`` (default: sidecar.listen; `healer sidecar
    --listen`): host:port, and not Triton's own port. That is triton.url's port when that Triton runs on this
    machine (a loopback or wildcard host: it binds every address) or at the same host, and
    rollback.replicas.port, Triton's port in the pods the sidecar runs in. healer.yaml names no gRPC or
    metrics port of Triton: there is nothing else to compare with."""
    listen = settings.sidecar.listen if listen is None else listen
    triton_url = settings.triton.url
    replicas_port = settings.rollback.replicas.port if settings.rollback.replicas is not None else None
    host, port = parse_address(listen, url=False)
    triton_host, triton_port = parse_address(triton_url, url=False)
    local = triton_host in _WILDCARD_HOSTS or triton_host in _LOOPBACK_HOSTS or triton_host.startswith("127.")
    if port == triton_port and (local or triton_host == host):
        raise ValueError(
            f"port {port} is Triton's (triton.url {triton_url!r}): the sidecar cannot listen where Triton does, "
            f"got {listen!r}"
        )
    if port == replicas_port:
        raise ValueError(
            f"port {port} is Triton's HTTP port in the replica pods (rollback.replicas.port), where the sidecar "
            f"runs beside it, got {listen!r}"
        )


def load_settings(path: str | Path) -> Settings:
    """Read and validate a healer YAML file. Raises ConfigError naming the file and key."""
    path = Path(path)
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(source, "", f"cannot read file: {getattr(exc, 'strerror', None) or exc}") from exc
    try:
        document = _load_yaml(text, source)
    except yaml.YAMLError as exc:
        raise ConfigError(source, "", f"not valid YAML: {exc}") from exc
    except RecursionError as exc:  # the depth check should stop this first; never a traceback all the same
        raise ConfigError(source, "", "nested too deeply to read") from exc
    try:
        return parse_settings(document, source=source, base_dir=path.parent)
    except RecursionError as exc:
        raise ConfigError(source, "", "nested too deeply to read") from exc


def parse_settings(document: Any, *, source: str, base_dir: Path) -> Settings:
    settings: Settings = parse_section(Settings, document, source=source, base_dir=base_dir)
    return settings


def parse_section(cls: type[T], document: Any, *, source: str, base_dir: Path, key: str = "") -> T:
    """A settings section read from its YAML mapping at ``key`` by its declaration (parse_settings:
    the whole file). Raises ConfigError naming ``source``, the key path and the problem."""
    section: T = _section(_Reader(source, base_dir), cls, document, key, None)
    return section


# ---- reading a section by its declaration --------------------------------------------------------------


@dataclass(frozen=True)
class DeclaredKey:
    """One declared key of a section: its field, its name in the file, its type and its default."""

    name: str  # the dataclass field
    key: str  # its name in healer.yaml
    spec: Setting
    kind: type  # the value's type without None: float, int, bool, str, Path, tuple or a section's class
    item: Any  # a list's item type (None: not a list)
    optional: bool  # ``X | None``: null or omitted is None
    default: Any  # MISSING: required

    @property
    def required(self) -> bool:
        return self.default is MISSING and not self.spec.alternatives

    def file_keys(self) -> tuple[str, ...]:
        """The keys this field reads in its section's mapping."""
        if self.spec.inline:
            return tuple(k for d in declared_keys(self.kind) for k in d.file_keys())
        if self.spec.alternatives:
            return tuple(name for name, _, _ in self.spec.alternatives)
        return (self.key,)


def is_section(kind: Any) -> bool:
    return isinstance(kind, type) and dataclasses.is_dataclass(kind)


def declared_keys(cls: type[Any]) -> tuple[DeclaredKey, ...]:
    """The keys ``cls`` declares, in the order of its fields (a field without a Setting is no key)."""
    if cls not in _DECLARED:
        _DECLARED[cls] = _declare(cls)
    return _DECLARED[cls]


_DECLARED: dict[type[Any], tuple[DeclaredKey, ...]] = {}


def _declare(cls: type[Any]) -> tuple[DeclaredKey, ...]:
    hints = typing.get_type_hints(cls)
    found = []
    for f in dataclasses.fields(cls):
        spec = f.metadata.get(SETTING)
        if spec is None:
            continue
        kind, optional = _without_none(hints[f.name])
        item = None
        if typing.get_origin(kind) is tuple:
            item = typing.get_args(kind)[0]
            kind = tuple
        default: Any = f.default
        if f.default_factory is not MISSING:
            default = f.default_factory()
        elif default is MISSING and is_section(kind) and all(d.default is not MISSING for d in declared_keys(kind)):
            default = kind()  # a section every key of which has a default: omitting it means all defaults
        found.append(DeclaredKey(f.name, spec.key or f.name, spec, kind, item, optional, default))
    return tuple(found)


def _without_none(hint: Any) -> tuple[Any, bool]:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        rest = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(rest) == 1:
            return rest[0], True
    return hint, False


def _section(reader: _Reader, cls: type[Any], raw: Any, key: str, default: Any) -> Any:
    """``cls`` from its mapping ``raw`` at ``key``; missing keys take ``default``'s values (None: the
    fields' defaults). The section's own rules run before (_CHECK) and after (_BUILD) its keys are read."""
    declared = declared_keys(cls)
    data = reader.mapping(
        raw,
        key,
        # With a default section (sidecar.readiness's), a missing key takes its value: none is required.
        required=set() if default is not None else {k for d in declared for k in _required_keys(d)},
        optional={k for d in declared for k in d.file_keys()},
        deprecated=getattr(cls, "deprecated_keys", {}),
    )
    check = _CHECK.get(cls)
    if check is not None:
        check(reader, key, data)
    values: dict[str, Any] = {}
    for d in declared:
        if d.spec.alternatives:
            continue  # read by the section's _BUILD step
        path = f"{key}.{d.key}" if key else d.key
        if d.spec.inline:
            own = set(d.file_keys())
            values[d.name] = _section(reader, d.kind, {k: v for k, v in data.items() if k in own}, key, None)
            continue
        fallback = getattr(default, d.name) if default is not None else d.default
        raw_value = data.get(d.key, MISSING)
        if _takes_default(d, raw_value, fallback):
            values[d.name] = fallback
        else:
            values[d.name] = _value(reader, d, d.kind, raw_value, path, fallback)
    build = _BUILD.get(cls)
    return build(reader, key, data, values) if build is not None else cls(**values)


def _required_keys(d: DeclaredKey) -> tuple[str, ...]:
    if d.spec.inline:
        return tuple(k for inner in declared_keys(d.kind) for k in _required_keys(inner))
    return d.file_keys() if d.required else ()


def _takes_default(d: DeclaredKey, raw: Any, fallback: Any) -> bool:
    """Omitted; or null where that means the default (an optional key, a section or list that has
    one); or blank where the key says so. A scalar that must have a value refuses null."""
    if raw is MISSING:
        return True
    if raw is None and (d.optional or (fallback is not MISSING and (d.kind is tuple or is_section(d.kind)))):
        return True
    return d.spec.blank_is_default and raw in (None, "")


def _value(reader: _Reader, d: DeclaredKey, kind: Any, raw: Any, path: str, fallback: Any) -> Any:
    spec = d.spec
    if spec.under is not None:
        raw = reader.mapping(raw, path, required={spec.under})[spec.under]
        path = f"{path}.{spec.under}"
    if is_section(kind):
        return _section(reader, kind, raw, path, fallback if is_section(type(fallback)) else None)
    if kind is tuple:
        items = reader.sequence(raw, path, min_length=spec.min_items)
        return tuple(_value(reader, d, d.item, item, f"{path}[{i}]", None) for i, item in enumerate(items))
    return _scalar_value(reader, spec, kind, raw, path)


def _scalar_value(reader: _Reader, spec: Setting, kind: Any, raw: Any, path: str) -> Any:
    if kind is bool:
        if not isinstance(raw, bool):
            raise reader.fail(path, f"must be true or false, got {_describe(raw)}")
        return raw
    if kind in (int, float):
        minimum = -math.inf if spec.minimum is None else spec.minimum
        number = (
            reader.integer(raw, path, minimum=minimum) if kind is int else reader.number(raw, path, minimum=minimum)
        )
        if spec.maximum is not None and number > spec.maximum:
            raise reader.fail(path, f"{spec.above_maximum or f'must be <= {spec.maximum:g}'}, got {number:g}")
        return number
    if kind is Path:
        return reader.path(raw, path)
    if spec.form is not None:
        return _read_form(reader, spec.form, raw, path)
    text = reader.string(raw, path)
    if spec.choices and text not in spec.choices:
        raise reader.fail(path, f"must be {_choices(spec.choices)}, got {text!r}")
    return text


def _choices(choices: Sequence[str]) -> str:
    if len(choices) == 2:
        return f"{choices[0]!r} or {choices[1]!r}"
    return f"one of {', '.join(choices)}"


def _read_form(reader: _Reader, form: str, raw: Any, key: str) -> str:
    """A string of one of FORMS, checked: the one place each such check is written."""
    if form == "version":
        # YAML reads `version: 3` as a number: Triton's versions are numbers, so take it as written.
        text = str(raw) if isinstance(raw, int) and not isinstance(raw, bool) else reader.string(raw, key)
        if not VERSION_PATTERN.match(text):
            raise reader.fail(key, f"must be a positive integer (Triton version directories are numbers), got {raw!r}")
        return text
    text = reader.string(raw, key)
    if form in ("address", "url"):
        try:
            parse_address(text, url=form == "url")
        except ValueError as exc:
            raise reader.fail(key, str(exc)) from None
    elif form == "model-name" and (not MODEL_NAME_PATTERN.match(text) or ".." in text):
        raise reader.fail(
            key,
            "must be 1-128 characters of letters, digits, '_', '.', '-', not start with '.' or '-' "
            f"and contain no '..' (it becomes a path and a URL), got {text!r}",
        )
    elif form == "set-name" and (
        not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}", text) or ".." in text or text in RESERVED_SET_NAMES
    ):
        raise reader.fail(key, f"must be a name ([A-Za-z0-9_.-], not ledger/audit/lease), got {text!r}")
    return text


# ---- the rules that tie keys together: one function per section that has any ---------------------------
# _CHECK runs on the section's mapping before its keys are read, _BUILD on the values read (and the
# mapping, to tell a key the file gives from a default) and returns the section.


def _build_settings(reader: _Reader, key: str, data: dict[str, Any], values: dict[str, Any]) -> Settings:
    store: StoreSettings | None = values["store"]
    if store is not None and store.s3 is not None and values["live_repository"] is None:
        raise reader.fail("live_repository", "is required with an S3 store (the directory Triton reads)")
    seen: dict[str, int] = {}
    for i, model in enumerate(values["models"]):
        if model.name in seen:
            raise reader.fail(f"models[{i}].name", f"duplicate model {model.name!r} (also models[{seen[model.name]}])")
        seen[model.name] = i
    settings = Settings(source=reader.source, **values)
    try:
        check_listen(settings)
    except ValueError as exc:
        given = "" if "listen" in (data.get("sidecar") or {}) else " (the default)"
        raise reader.fail("sidecar.listen", f"{exc}{given}") from None
    return settings


def _build_sidecar(reader: _Reader, key: str, data: dict[str, Any], values: dict[str, Any]) -> SidecarSettings:
    period_s, confirm_interval_s = values["period_s"], values["confirm_interval_s"]
    if 0 < confirm_interval_s < 0.05 or confirm_interval_s > period_s:
        raise reader.fail(
            f"{key}.confirm_interval_s",
            f"must be 0 (off) or between 0.05 and period_s ({period_s:g}), got {confirm_interval_s:g}",
        )
    return SidecarSettings(**values)


def _check_drain(reader: _Reader, key: str, data: dict[str, Any]) -> None:
    if (data.get("peers") is None) == (data.get("peer_urls") is None):
        raise reader.fail(key, "needs exactly one of 'peers' (Kubernetes) or 'peer_urls'")


def _build_drain(reader: _Reader, key: str, data: dict[str, Any], values: dict[str, Any]) -> DrainSettings:
    values["peer_urls"] = tuple(url.rstrip("/") for url in values["peer_urls"])
    if data.get("peer_urls") is not None and not values["peer_urls"]:
        raise reader.fail(f"{key}.peer_urls", "must list at least one sidecar URL")
    # With peer_urls the file must name the drain set. Nothing in it says which replica set this is:
    # a fixed name ("default", as before) is shared by every such set writing to the store, and one
    # set's writer prunes the other's drained pod (not among its peers), so the other's second pod
    # drains too. A name derived from the URLs would differ between sets, but it changes with the
    # list: while a rollout changes peer_urls, old and new pods of one set would use two drain sets and
    # could both drain. Only a person knows the set's lasting name. (With peers, namespace and
    # selector are the set's identity and stay put as it scales: the name is derived from them.)
    if values["peer_urls"] and values["set_name"] is None:
        raise reader.fail(
            f"{key}.set",
            "is required with peer_urls: name the replica set's drain set (the same name in every pod of "
            "the set, a different one in every other set sharing the store); `set: default` keeps the set "
            "these pods used before this was required, so a rolling upgrade does not split it in two",
        )
    return DrainSettings(**values)


def _check_store(reader: _Reader, key: str, data: dict[str, Any]) -> None:
    if ("filesystem" in data) == ("s3" in data):  # given, even as null: each then says what it lacks
        raise reader.fail(key, "needs exactly one of 'filesystem' or 's3'")


def _build_s3(reader: _Reader, key: str, data: dict[str, Any], values: dict[str, Any]) -> S3Settings:
    return S3Settings(**{**values, "prefix": values["prefix"].strip("/")})


def _build_rollback(reader: _Reader, key: str, data: dict[str, Any], values: dict[str, Any]) -> RollbackSettings:
    deadline_s = values["deadline_s"]
    # Each is one phase of the rollback: longer than the whole of it is a contradiction. A key the
    # file gives is named before a default it contradicts.
    phases = ("unload_timeout_s", "load_timeout_s")
    late = sorted((n for n in phases if values[n] > deadline_s), key=lambda n: n not in data)
    if late:
        name = late[0]
        raise reader.fail(
            f"{key}.{name}",
            f"must be at most {key}.deadline_s ({deadline_s:g} s): the {name.split('_')[0]} is part of the "
            f"rollback, got {values[name]:g}{'' if name in data else ' (the default)'}",
        )
    # The waves start at parallelism and grow up to max_parallelism: a ceiling below the first wave
    # is a contradiction when given; the default ceiling follows a larger first wave.
    if values["max_parallelism"] < values["parallelism"]:
        if "max_parallelism" in data:
            raise reader.fail(
                f"{key}.max_parallelism",
                f"must be at least {key}.parallelism ({values['parallelism']}), the first wave; got "
                f"{values['max_parallelism']}",
            )
        values = {**values, "max_parallelism": values["parallelism"]}
    return RollbackSettings(**values)


def _build_tracing(reader: _Reader, key: str, data: dict[str, Any], values: dict[str, Any]) -> TracingSettings:
    if values["enabled"] and not values["otlp_endpoint"]:
        raise reader.fail(f"{key}.otlp_endpoint", "is required when tracing is enabled")
    template = values["ui_link_template"]
    if template is not None and "{trace_id}" not in template:
        raise reader.fail(
            f"{key}.ui_link_template", f"must contain {{trace_id}} where the trace's id goes, got {template!r}"
        )
    return TracingSettings(**values)


def _build_golden(reader: _Reader, key: str, data: dict[str, Any], values: dict[str, Any]) -> GoldenRequest:
    _reject_duplicate_names(reader, [t.name for t in values["inputs"]], f"{key}.inputs")
    _reject_duplicate_names(reader, [o.tensor.name for o in values["outputs"]], f"{key}.outputs")
    latency_slo_ms, timeout_s = values["latency_slo_ms"], values["timeout_s"]
    if timeout_s * 1000 < latency_slo_ms:
        raise reader.fail(
            f"{key}.timeout_s", f"must be at least the latency SLO ({latency_slo_ms} ms), got {timeout_s} s"
        )
    return GoldenRequest(**values)


def _reject_duplicate_names(reader: _Reader, names: list[str], key: str) -> None:
    seen: set[str] = set()
    for i, name in enumerate(names):
        if name in seen:
            raise reader.fail(f"{key}[{i}].name", f"duplicate tensor name {name!r}")
        seen.add(name)


def _build_output(reader: _Reader, key: str, data: dict[str, Any], values: dict[str, Any]) -> ExpectedOutput:
    # Integers and booleans (class ids, token ids, flags) compare exactly unless a tolerance is given.
    if np.dtype(DATATYPES[values["tensor"].datatype]).kind in "biuO":
        values = {**values, **{name: 0.0 for name in ("atol", "rtol") if name not in data}}
    return ExpectedOutput(**values)


def _build_tensor(reader: _Reader, key: str, data: dict[str, Any], values: dict[str, Any]) -> TensorSpec:
    if ("data" in data) == ("file" in data):
        raise reader.fail(key, "needs exactly one of 'data' (inline values) or 'file'")
    if "file" in data:
        raw = _load_tensor_file(reader, data["file"], f"{key}.file")
        value_key = f"{key}.file"
    else:
        raw = data["data"]
        value_key = f"{key}.data"
    array = _to_array(reader, raw, values["datatype"], values["shape"], value_key)
    return TensorSpec(**values, values=array)


_CHECK: Mapping[type, Callable[[_Reader, str, dict[str, Any]], None]] = {
    DrainSettings: _check_drain,
    StoreSettings: _check_store,
}
_BUILD: Mapping[type, Callable[[_Reader, str, dict[str, Any], dict[str, Any]], Any]] = {
    Settings: _build_settings,
    SidecarSettings: _build_sidecar,
    DrainSettings: _build_drain,
    S3Settings: _build_s3,
    RollbackSettings: _build_rollback,
    TracingSettings: _build_tracing,
    GoldenRequest: _build_golden,
    ExpectedOutput: _build_output,
    TensorSpec: _build_tensor,
}


def _load_tensor_file(reader: _Reader, raw: Any, key: str) -> Any:
    path = reader.path(raw, key)
    try:
        if path.suffix == ".npy":
            return np.load(path, allow_pickle=False)
        if path.suffix == ".json":
            return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, EOFError) as exc:
        raise ConfigError(reader.source, key, f"cannot read {str(path)!r}: {exc}") from exc
    raise ConfigError(reader.source, key, f"must end in .npy or .json, got {str(path)!r}")


def _to_array(reader: _Reader, values: Any, datatype: str, shape: tuple[int, ...], key: str) -> npt.NDArray[Any]:
    try:
        array = _bytes_array(values) if datatype == "BYTES" else _numeric_array(values, np.dtype(DATATYPES[datatype]))
    except (TypeError, ValueError, OverflowError) as exc:
        raise ConfigError(reader.source, key, f"values do not fit datatype {datatype}: {exc}") from exc
    if array.size != math.prod(shape):
        raise ConfigError(
            reader.source, key, f"has {array.size} values but shape {list(shape)} needs {math.prod(shape)}"
        )
    array = array.reshape(shape)
    array.setflags(write=False)
    return array


def _bytes_array(values: Any) -> npt.NDArray[Any]:
    array = np.array(values, dtype=np.object_)
    for item in array.reshape(-1):
        if not isinstance(item, str | bytes):
            raise ValueError(f"BYTES values must be strings, got {item!r}")
    encoded: npt.NDArray[Any] = np.vectorize(lambda v: v if isinstance(v, bytes) else v.encode(), otypes=[np.object_])(
        array
    )
    return encoded


def _numeric_array(values: Any, target: np.dtype[Any]) -> npt.NDArray[Any]:
    """Convert without silent loss: no 1.5 -> 1 for integers, no 300 -> 44 for UINT8, no null -> NaN."""
    # YAML has no NaN/Inf literals that survive every tool: accept the strings too.
    raw = np.array(_parse_special_floats(values))
    if raw.dtype.kind not in "biuf":
        raise ValueError(f"values must be numbers, got {'text' if raw.dtype.kind == 'U' else 'non-numbers'}")
    # numpy turns [True, 1] into integers: look at the YAML values themselves for stray booleans.
    has_bool = raw.dtype.kind == "b" or any(isinstance(v, bool) for v in _leaves(values))
    if target.kind == "b":
        if raw.dtype.kind != "b":
            raise ValueError("BOOL values must be true or false")
    elif target.kind in "iu":
        if has_bool:
            raise ValueError("integer values must not be true/false")
        if raw.dtype.kind == "f" and raw.size and not np.all(np.isfinite(raw) & (raw == np.round(raw))):
            raise ValueError("integer datatype needs whole numbers")
        info = np.iinfo(target)
        if raw.size and (raw.min() < info.min or raw.max() > info.max):
            raise ValueError(f"values must lie in [{info.min}, {info.max}]")
    elif has_bool:
        raise ValueError("floating-point values must not be true/false")
    with np.errstate(over="ignore"):
        converted = raw.astype(target)
    if target.kind == "f" and raw.dtype.kind in "iuf" and raw.size:
        overflow = np.isfinite(raw.astype(np.float64)) & ~np.isfinite(converted.astype(np.float64))
        if overflow.any():
            raise ValueError(f"{raw.reshape(-1)[np.argmax(overflow.reshape(-1))]!r} overflows {target.name}")
    return converted


def _leaves(values: Any) -> list[Any]:
    if isinstance(values, list):
        return [leaf for item in values for leaf in _leaves(item)]
    return [values]


def _parse_special_floats(values: Any) -> Any:
    if isinstance(values, list):
        return [_parse_special_floats(v) for v in values]
    if isinstance(values, str) and values.strip().lower() in {
        "nan",
        "inf",
        "+inf",
        "-inf",
        "infinity",
        "-infinity",
    }:
        return float(values)
    return values


# Deep enough for any config (a tensor's nesting is its rank, at most 64 in numpy); PyYAML builds the
# document recursively, so a file nested thousands of levels deep would otherwise hit RecursionError.
MAX_YAML_DEPTH = 100
_STR_TAG = "tag:yaml.org,2002:str"
_MERGE_TAG = "tag:yaml.org,2002:merge"


def _load_yaml(text: str, source: str) -> Any:
    """The YAML document, refusing excessive nesting and any mapping key that is not a string."""
    # Nesting first, from the parser's events: the parser keeps its own stack, it does not recurse.
    depth = 0
    for event in yaml.parse(text, Loader=_Yaml12FloatLoader):
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_YAML_DEPTH:
                mark = event.start_mark
                where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
                raise ConfigError(source, "", f"nested more than {MAX_YAML_DEPTH} levels deep{where}")
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
    loader = _Yaml12FloatLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_keys(node, source)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _check_keys(root: yaml.Node, source: str) -> None:
    """Every mapping key must be a string: healer's keys all are, and a list or mapping as a key
    (``? [a, b]: 1``) cannot even be read into a dict. The error names the mapping's key path."""
    seen: set[int] = set()
    todo: list[tuple[yaml.Node, str]] = [(root, "")]
    while todo:
        node, path = todo.pop()
        if id(node) in seen:  # an alias: checked where its anchor is
            continue
        seen.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            todo += [(child, f"{path}[{i}]") for i, child in enumerate(node.value)]
        elif isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if key.tag == _MERGE_TAG:  # "<<: *defaults" merges the other mapping's keys here
                    todo.append((value, path))
                    continue
                if not isinstance(key, yaml.ScalarNode) or key.tag != _STR_TAG:
                    raise ConfigError(
                        source,
                        path or "(top level)",
                        f"mapping keys must be strings, got {_describe_key(key)} as a key on line "
                        f"{key.start_mark.line + 1}",
                    )
                todo.append((value, f"{path}.{key.value}" if path else str(key.value)))


def _describe_key(node: yaml.Node) -> str:
    if isinstance(node, yaml.SequenceNode):
        return "a list"
    if isinstance(node, yaml.MappingNode):
        return "a mapping"
    kind = node.tag.rpartition(":")[2] if node.tag.startswith("tag:yaml.org,2002:") else node.tag
    return f"{node.value!r}, read as {kind} (quote it to make it a string)"


class _Yaml12FloatLoader(yaml.SafeLoader):
    """SafeLoader that reads 1e-3 and 5E+2 as floats, as YAML 1.2 does (PyYAML's 1.1 rules make them
    strings), and refuses a key given twice in one mapping (PyYAML silently keeps the last)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _value_node in node.value:
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first on line {seen[key] + 1})", key_node.start_mark
                )
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)


_Yaml12FloatLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
        |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
        |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
    list("-+0123456789."),
)


T = TypeVar("T")


class _Reader:
    """Typed accessors that know the file and key path, so every error says where it is."""

    def __init__(self, source: str, base_dir: Path) -> None:
        self.source = source
        self.base_dir = base_dir

    def fail(self, key: str, problem: str) -> ConfigError:
        return ConfigError(self.source, key, problem)

    def mapping(
        self,
        raw: Any,
        key: str,
        *,
        required: AbstractSet[str] = frozenset(),
        optional: AbstractSet[str] = frozenset(),
        deprecated: Mapping[str, str] = MappingProxyType({}),
    ) -> dict[str, Any]:
        """``raw`` as a mapping of the keys allowed here; a ``deprecated`` key is logged with what to do,
        then left out."""
        if not isinstance(raw, dict):
            raise self.fail(key or "(top level)", f"must be a mapping, got {_describe(raw)}")
        prefix = f"{key}." if key else ""
        data: dict[str, Any] = raw
        if any(name in deprecated for name in data):
            for name in sorted(set(data) & set(deprecated)):
                log.warning("config_key_deprecated", file=self.source, key=f"{prefix}{name}", todo=deprecated[name])
            data = {name: value for name, value in data.items() if name not in deprecated}
        for name in data:
            if name not in required and name not in optional:
                allowed = ", ".join(sorted(required | optional))
                raise self.fail(f"{prefix}{name}", f"unknown key (allowed here: {allowed})")
        for name in sorted(required):
            if name not in data:
                raise self.fail(f"{prefix}{name}", "is required")
        return data

    def sequence(self, raw: Any, key: str, *, min_length: int = 0) -> list[Any]:
        if not isinstance(raw, list):
            raise self.fail(key, f"must be a list, got {_describe(raw)}")
        if len(raw) < min_length:
            raise self.fail(key, f"must have at least {min_length} item(s), got {len(raw)}")
        return raw

    def string(self, raw: Any, key: str) -> str:
        if not isinstance(raw, str) or not raw:
            raise self.fail(key, f"must be a non-empty string, got {_describe(raw)}")
        return raw

    def number(self, raw: Any, key: str, *, minimum: float) -> float:
        return self._checked(raw, key, minimum, lambda v: isinstance(v, int | float), "a number", float)

    def integer(self, raw: Any, key: str, *, minimum: float) -> int:
        return self._checked(raw, key, minimum, lambda v: isinstance(v, int), "an integer", int)

    def _checked(
        self,
        raw: Any,
        key: str,
        minimum: float,
        accepts: Callable[[Any], bool],
        what: str,
        cast: Callable[[Any], T],
    ) -> T:
        if isinstance(raw, bool) or not accepts(raw) or (isinstance(raw, float) and not math.isfinite(raw)):
            raise self.fail(key, f"must be {what}, got {_describe(raw)}")
        if raw < minimum:
            raise self.fail(key, f"must be >= {minimum:g}, got {raw:g}")
        return cast(raw)

    def address(self, raw: Any, key: str, *, url: bool) -> str:
        """A host:port (``url`` False) or an http(s) URL, checked by ``parse_address``."""
        text = self.string(raw, key)
        try:
            parse_address(text, url=url)
        except ValueError as exc:
            raise self.fail(key, str(exc)) from None
        return text

    def path(self, raw: Any, key: str) -> Path:
        path = Path(self.string(raw, key)).expanduser()
        return path if path.is_absolute() else (self.base_dir / path)


def _describe(raw: Any) -> str:
    if raw is None:
        return "nothing (null)"
    if isinstance(raw, bool | int | float):
        return f"{raw!r}"
    if isinstance(raw, str):
        return f"{raw!r}" if raw else "an empty string"
    return f"a {type(raw).__name__}"
