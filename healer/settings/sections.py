"""The sections of healer.yaml: one frozen dataclass per mapping, each key declared once on the field
that holds it (``setting(...)``, healer/settings/schema.py). ``Settings`` is the whole file."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from healer.settings.expect import Expect
from healer.settings.schema import setting
from healer.vocabulary import DATATYPES, MAX_BAKE_S, RELEASE_DEADLINE_S


class FrozenParameters(Mapping[str, "str | int | float | bool"]):
    """A golden request's parameters, read-only and picklable (a MappingProxyType is not: the heal runs in
    child processes that receive the settings by pickle)."""

    __slots__ = ("_items",)

    def __init__(self, items: Mapping[str, str | int | float | bool]) -> None:
        self._items = dict(items)

    def __getitem__(self, key: str) -> str | int | float | bool:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"FrozenParameters({self._items!r})"


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
class OutputTensor(TensorSpec):
    """An expected output's tensor: as an input's, but its shape may take -1 (any size) or be left out, and
    its values may be left out where ``expect`` judges the answer without them."""

    shape: tuple[int, ...] | None = field(  # type: ignore[assignment]
        default=None,
        metadata=setting(
            "its shape; -1 takes any size (an answer of varying length)",
            minimum=-1,
            min_items=1,
            default_doc="not checked (only with expect)",
        ),
    )
    values: npt.NDArray[Any] | None = field(  # type: ignore[assignment]
        default=None,
        metadata=setting(
            "exactly one of data or file (not with a text expect); the values must fit the datatype without loss",
            alternatives=(
                ("data", object, 'the values inline, nested as the shape (NaN/Inf: .nan, .inf or "nan", "inf")'),
                ("file", Path, "a .npy or .json file holding them"),
            ),
        ),
    )


@dataclass(frozen=True, eq=False)
class ExpectedOutput:
    tensor: OutputTensor = field(metadata=setting("the expected tensor", inline=True))
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
    # None: the values compared element by element (atol, rtol; BYTES exactly), as before comparators.
    expect: Expect | None = field(
        default=None,
        metadata=setting(
            "comparators for an answer that is not a tensor of known values (text, normalised, regex, one_of, "
            "json, length, not_degenerate, top_k); every one given must hold",
            default_doc="the values compared (atol, rtol)",
        ),
    )


ENDPOINT_INFER = "infer"
ENDPOINT_GENERATE = "generate"
ENDPOINT_STREAM = "generate_stream"
ENDPOINTS = (ENDPOINT_INFER, ENDPOINT_GENERATE, ENDPOINT_STREAM)
# The keys that judge a stream's timing: refused with another endpoint.
STREAM_KEYS = ("first_token_slo_ms", "inter_token_slo_ms", "stall_s")


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
    # Named in the why of a failure; the loader names an unnamed one by its place (golden, golden[2]).
    name: str = field(
        default="",
        metadata=setting(
            "the request's name, unique within the model's suite; a failure's why names it",
            default_doc="its key: golden, or golden[i] in a list",
        ),
    )
    # Triton's generate extension (probes/stream.py): the inputs as the JSON body's fields, the answer's
    # fields (a stream's events' values, concatenated) as the outputs.
    endpoint: str = field(
        default=ENDPOINT_INFER,
        metadata=setting(
            "where the request goes: infer (tensors, /infer), generate (one JSON answer, /generate) or "
            "generate_stream (server-sent events, /generate_stream: an LLM's tokens); with generate and "
            "generate_stream each input is a field of the JSON body (one value: a scalar, else a list) and "
            "each expected output a field of the answer (a stream's: its events' values concatenated)",
            choices=ENDPOINTS,
        ),
    )
    # Written as a mapping in the file; read by the loader's _build_golden (name -> a string, number or bool).
    parameters: Mapping[str, str | int | float | bool] = field(
        default_factory=lambda: FrozenParameters({}),
        metadata=setting(
            "request parameters passed through in the body's parameters, e.g. greedy decoding, a fixed seed, "
            "a token limit",
            alternatives=(
                (
                    "parameters",
                    dict,
                    "a mapping of parameter names to a string, number or true/false, e.g. {temperature: 0, "
                    "seed: 7, max_tokens: 16}",
                ),
            ),
            default_doc="none",
        ),
    )
    first_token_slo_ms: float | None = field(
        default=None,
        metadata=setting(
            "generate_stream only: a first event later than this (from the request) fails the business tier (slow)",
            minimum=0.001,
            default_doc="not checked",
        ),
    )
    inter_token_slo_ms: float | None = field(
        default=None,
        metadata=setting(
            "generate_stream only: a largest gap between two events above this fails the business tier (slow)",
            minimum=0.001,
            default_doc="not checked",
        ),
    )
    stall_s: float | None = field(
        default=None,
        metadata=setting(
            "generate_stream only: no event for this long while the stream is open is a hang (fail, code "
            "timeout, when Triton is live and the version ready); at most timeout_s",
            minimum=0.001,
            default_doc="timeout_s",
        ),
    )
    input_hash: str = field(init=False)

    def __post_init__(self) -> None:
        digest = hash_inputs(self.inputs)
        if self.endpoint != ENDPOINT_INFER or self.parameters:
            # What else makes the answer: an infer request without parameters keeps the hash it had.
            what = json.dumps([digest, self.endpoint, dict(self.parameters)], sort_keys=True, separators=(",", ":"))
            digest = hashlib.sha256(what.encode()).hexdigest()
        object.__setattr__(self, "input_hash", digest)

    @property
    def stream(self) -> bool:
        return self.endpoint == ENDPOINT_STREAM

    @property
    def stall_limit_s(self) -> float:
        """No event for this long while a stream is open: the model hangs."""
        return self.stall_s if self.stall_s is not None else self.timeout_s


# One replay request at most (a fifth of the agreement gate's 300 s deadline, workflows/steps/agreement.py).
AGREEMENT_MAX_TIMEOUT_S = 60


@dataclass(frozen=True)
class AgreementSettings:
    """Agreement with the stable version (docs/agreement.md): the replay set in the store (MODEL/replay/,
    MODEL/VERSION/replay/) sent to the new and the stable version, judged by these rules during a release's
    bake and by ``healer promote --agreement``. At least one of the three rules."""

    argmax_min_ratio: float | None = field(
        default=None,
        metadata=setting(
            "the share of inputs whose class outputs (floats, more than one value on the last axis) have the "
            "same argmax on both versions must be at least this",
            minimum=0,
            maximum=1,
            default_doc="not judged",
        ),
    )
    label_min_ratio: float | None = field(
        default=None,
        metadata=setting(
            "the share of inputs whose label outputs (integers, booleans, BYTES) are equal on both must be at least "
            "this",
            minimum=0,
            maximum=1,
            default_doc="not judged",
        ),
    )
    max_abs_diff: float | None = field(
        default=None,
        metadata=setting(
            "each input's largest absolute difference over the float outputs, at at_quantile, within this",
            minimum=0,
            default_doc="not judged",
        ),
    )
    at_quantile: float = field(
        default=0.99, metadata=setting("the quantile of the inputs max_abs_diff holds for", minimum=0, maximum=1)
    )
    outputs: tuple[str, ...] = field(
        default=(), metadata=setting("the outputs judged", default_doc="every output either version returns")
    )
    timeout_s: float = field(
        default=5.0,
        metadata=setting(
            "one replay input's request to one version",
            minimum=0.001,
            maximum=AGREEMENT_MAX_TIMEOUT_S,
            above_maximum=(
                f"must be at most {AGREEMENT_MAX_TIMEOUT_S:g} s (the gate has 300 s for the whole replay set, in a "
                "release's bake; an input is two requests)"
            ),
        ),
    )


# What the sidecar does with what it decides (docs/observe.md): act on it, or only record the plan.
MODE_ACT = "act"
MODE_OBSERVE = "observe"
MODES = (MODE_ACT, MODE_OBSERVE)


@dataclass(frozen=True, eq=False, init=False)
class ModelSettings:
    """One model and its golden suite. ``suite`` is every golden request (the key ``golden``: one mapping,
    or a list); ``golden`` is its first, what a caller that sends one request reads. Built either way:
    ``ModelSettings(name=..., golden=request)`` is a suite of one; ``suite=(...)`` sets ``golden`` to its
    first; both (``dataclasses.replace(m, golden=...)``) replace the suite's first request."""

    name: str = field(metadata=setting("the model's name in Triton, unique in the file", form="model-name"))
    suite: tuple[GoldenRequest, ...] = field(
        metadata=setting(
            "the golden suite: one request with a known answer (a mapping), or a list of them, every one "
            "judged each cycle",
            key="golden",
            min_items=1,
            one_or_list=True,
        )
    )
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
    # A pipeline versions requests with the model: <model>/golden/*.yaml (every version's) and
    # <model>/<version>/golden/*.yaml (that version's own) in the store (probes/store_suite.py).
    golden_in_store: bool = field(
        default=False,
        metadata=setting(
            "also the golden requests in the store beside the model (one request each, as under golden; data "
            "inline), after golden's: MODEL/golden/NAME.yaml for every version, the stable ones included, and "
            "MODEL/VERSION/golden/NAME.yaml for that version alone (files of the version); needs store"
        ),
    )
    # A BLS model's composing models (an ensemble's are read from Triton's own config): healer/core/pipeline.py.
    calls: tuple[str, ...] = field(
        default=(),
        metadata=setting(
            "a BLS model's composing models, the models it calls (an ensemble's are read from Triton's config): "
            "the model's suite judges the pipeline, and a failure after one of them changed version rolls that "
            "one back (docs/pipelines.md); they need no golden request of their own",
            form="model-name",
            default_doc="none (an ensemble: its steps' models)",
        ),
    )
    # Observe-only (docs/observe.md): None follows sidecar.mode.
    mode: str | None = field(
        default=None,
        metadata=setting(
            "act: heal this model; observe: detect, decide and record the plan without acting (no drain, no "
            "rollback); overrides sidecar.mode, and a change is read without a restart",
            choices=MODES,
            default_doc="sidecar.mode",
        ),
    )
    # Agreement with the stable version on the store's replay set (docs/agreement.md): None, no such gate.
    agreement: AgreementSettings | None = field(
        default=None,
        metadata=setting(
            "judge a release (and promote --agreement) by its answers to the replay set beside the stable version's",
            default_doc="no agreement gate",
        ),
    )
    golden: GoldenRequest = field(default=None)  # type: ignore[assignment]  # set by __init__: suite[0]
    # Whether healer.yaml wrote golden as a list: its requests' keys are golden[i], else golden.
    listed: bool = False

    def __init__(
        self,
        name: str,
        golden: GoldenRequest | None = None,
        version: str | None = None,
        required: bool = True,
        *,
        suite: tuple[GoldenRequest, ...] = (),
        listed: bool = False,
        golden_in_store: bool = False,
        calls: tuple[str, ...] = (),
        mode: str | None = None,
        agreement: AgreementSettings | None = None,
    ) -> None:
        if golden is None and not suite:
            raise TypeError("ModelSettings needs golden or suite")
        if golden is not None and (not suite or suite[0] is not golden):
            suite = (golden, *suite[1:])
        for key, value in (("name", name), ("suite", tuple(suite)), ("version", version), ("required", required)):
            object.__setattr__(self, key, value)
        object.__setattr__(self, "golden", suite[0])
        object.__setattr__(self, "listed", listed)
        object.__setattr__(self, "golden_in_store", golden_in_store)
        object.__setattr__(self, "calls", tuple(calls))
        object.__setattr__(self, "mode", mode)
        object.__setattr__(self, "agreement", agreement)

    def golden_key(self, index: int) -> str:
        """A request's key within the model's mapping: ``golden`` or ``golden[2]``."""
        return f"golden[{index}]" if self.listed else "golden"


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


# An alert's whole send is bounded by rollback.alert.timeout_s; this bounds that (issue 31 item 4, review).
ALERT_MAX_TIMEOUT_S = 15


@dataclass(frozen=True)
class AlertSettings:
    webhook_url: str | None = field(
        default=None,
        metadata=setting(
            "Alertmanager's base URL; alerts go to <url>/api/v2/alerts", form="url", default_doc="no alerts sent"
        ),
    )
    timeout_s: float = field(
        default=5.0,
        metadata=setting(
            "timeout of one alert's delivery, the whole send (an info alert is sent after the action, never "
            "holding a lease)",
            minimum=0.001,
            maximum=ALERT_MAX_TIMEOUT_S,
            above_maximum=(
                f"must be at most {ALERT_MAX_TIMEOUT_S:g} s (an alert is sent inside the rollback's deadline, "
                "90 s by default: a hanging Alertmanager must not use it up)"
            ),
        ),
    )
    runbook_url: str = field(
        default="https://github.com/healer-dev/healer/blob/main/runbooks/rollback-escalated.md",
        metadata=setting("the runbook an escalation alert links to", form="url"),
    )
    # A word for every action (issue 31 item 4; docs/alerts.md): off by default, the escalations only.
    info: bool = field(
        default=False,
        metadata=setting(
            "also send an info alert, resolving itself 5 minutes later, for every action: a healed incident, "
            "a release rolled out, an observe-only decision (escalations stay critical)"
        ),
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
    """Every Triton a rollback or a release must heal: the Running pods matching a label selector
    (the Kubernetes API), or a fixed list of Triton addresses (VMs, bare metal, the embedded drills:
    no Kubernetes). Exactly one of ``selector`` or ``addresses`` (healer/settings/loader.py)."""

    namespace: str | None = field(
        default=None,
        metadata=setting("the Triton pods' namespace (with selector)", default_doc="required with selector"),
    )
    selector: str | None = field(
        default=None,
        metadata=setting(
            "their label selector, e.g. app.kubernetes.io/name=triton (or addresses)", default_doc="or addresses"
        ),
    )
    port: int = field(
        default=8000,
        metadata=setting("Triton's HTTP port in those pods (with selector)", minimum=1, maximum=65535),
    )
    # Each entry a Triton's host:port, or {triton: host:port, sidecar: host:port} where its sidecar is not
    # at the Triton's host on sidecar.listen's port (repository_mode per-pod: the rollback asks that
    # sidecar to stage the version in the pod's own repository). Read by the loader's _build_replicas,
    # which fills ``sidecars`` beside it.
    addresses: tuple[str, ...] = field(
        default=(),
        metadata=setting(
            "every Triton, at least one: its HTTP host:port (e.g. 10.0.0.5:8000), or {triton: host:port, "
            "sidecar: host:port} to name the healer sidecar beside it (per-pod repository_mode; without it: "
            "the Triton's host on sidecar.listen's port); or selector",
            alternatives=(("addresses", tuple, "the Tritons a rollback or a release heals, each once"),),
            default_doc="or selector",
        ),
    )
    # Not a key: the sidecar given beside each entry of ``addresses`` ("" where none was given).
    sidecars: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.sidecars and len(self.sidecars) != len(self.addresses):
            raise ValueError(f"{len(self.sidecars)} sidecars for {len(self.addresses)} addresses")

    def sidecar_of(self, index: int) -> str:
        """The sidecar named beside ``addresses[index]`` ("" when the entry named none)."""
        return self.sidecars[index] if self.sidecars else ""

    @property
    def pod_query(self) -> tuple[str, str] | None:
        """(namespace, selector) of the pods to list through the Kubernetes API; None: ``addresses``."""
        if self.selector is None:
            return None
        return (self.namespace or "default", self.selector)


ROLLBACK_ORDERS = ("swap", "unload-first")
ROLLBACK_ENGINES = ("local", "argo")
REPOSITORY_SHARED = "shared"
REPOSITORY_OBJECT_STORE = "object-store"
REPOSITORY_PER_POD = "per-pod"
REPOSITORY_MODES = (REPOSITORY_SHARED, REPOSITORY_OBJECT_STORE, REPOSITORY_PER_POD)
# rollback.deadline_s at most: the budget is 90 s by design, and the deadline also sizes the rollback's
# lease (deadline + unload + 2 x load + margin, workflows/steps/lease.py) and its workflow's
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
            "heal every replica: the Running pods matching a selector (Kubernetes API), or a list of addresses",
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
class TrafficLimits:
    """One model's own limits on its real traffic (docs/traffic-signal.md); unset keys take sidecar.traffic's."""

    model: str = field(metadata=setting("the model these limits are for", form="model-name"))
    min_requests: int | None = field(
        default=None, metadata=setting("its min_requests", minimum=1, default_doc="sidecar.traffic's")
    )
    max_failure_ratio: float | None = field(
        default=None, metadata=setting("its max_failure_ratio", minimum=0, maximum=1, default_doc="sidecar.traffic's")
    )
    max_mean_latency_ms: float | None = field(
        default=None, metadata=setting("its max_mean_latency_ms", minimum=0.001, default_doc="sidecar.traffic's")
    )


# One scrape of Triton's metrics runs on the probe loop's thread once per period (review of issue 31 item 2).
TRAFFIC_MAX_TIMEOUT_S = 5


@dataclass(frozen=True)
class TrafficSettings:
    """Triton's own numbers as a signal (docs/traffic-signal.md): the sidecar reads its pod's Triton metrics
    and judges the real traffic of each model version over a window. Off by default."""

    enabled: bool = field(
        default=False,
        metadata=setting("judge real traffic from Triton's metrics: a failure ratio or latency over its limit fails"),
    )
    metrics_url: str | None = field(
        default=None,
        metadata=setting(
            "Triton's metrics endpoint; set alone (enabled false) it measures every incident's blast radius only",
            form="url",
            default_doc="triton.url's host, port 8002, /metrics (when enabled)",
        ),
    )
    window_s: float = field(default=30.0, metadata=setting("the window real traffic is judged over", minimum=1))
    min_requests: int = field(
        default=20, metadata=setting("fewer real requests in a window: nothing learnt", minimum=1)
    )
    max_failure_ratio: float = field(
        default=0.05,
        metadata=setting("failed / real requests in a window over this fails the version", minimum=0, maximum=1),
    )
    max_mean_latency_ms: float | None = field(
        default=None,
        metadata=setting(
            "the real requests' mean latency (Triton's request duration) over this fails the version",
            minimum=0.001,
            default_doc="latency not judged",
        ),
    )
    timeout_s: float = field(
        default=1.0,
        metadata=setting(
            "one scrape of the metrics endpoint",
            minimum=0.001,
            maximum=TRAFFIC_MAX_TIMEOUT_S,
            above_maximum=(
                f"must be at most {TRAFFIC_MAX_TIMEOUT_S:g} s (one scrape per probe period, on the probe loop's "
                "thread; the rollback's blast radius read waits 5 s at most)"
            ),
        ),
    )
    models: tuple[TrafficLimits, ...] = field(
        default=(), metadata=setting("per-model limits over these", default_doc="none")
    )


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
    # call is left to its thread and counted as "maybe delivered" (healer/sidecar/handover.py BoundedCalls).
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
    mode: str = field(
        default=MODE_ACT,
        metadata=setting(
            "act: drain and roll back; observe: detect, decide and record the plan (healer status, metrics, "
            "Events, healer runs) without acting, for every model whose own mode is not set; a change is read "
            "without a restart (docs/observe.md)",
            choices=MODES,
        ),
    )
    traffic: TrafficSettings = field(
        default_factory=TrafficSettings,
        metadata=setting("Triton's own numbers as a signal, and every incident's blast radius; off by default"),
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
    # How Triton reads its models (issue 29): one volume every replica and healer mount (shared), the
    # store itself (object-store: Triton's --model-repository is the bucket, no copy), or each pod's own
    # copy that its sidecar stages (per-pod). The loader ties it to store and live_repository.
    repository_mode: str = field(
        default=REPOSITORY_SHARED,
        metadata=setting(
            "where Triton reads its models: shared (live_repository, one directory every replica and healer "
            "mount), object-store (Triton reads the store itself, e.g. --model-repository=s3://...; no copy, "
            "no live_repository), per-pod (each replica's own copy, staged by its sidecar)",
            choices=REPOSITORY_MODES,
        ),
    )
    # The directory Triton reads (its --model-repository). None: the filesystem store itself.
    live_repository: Path | None = field(
        default=None,
        metadata=setting(
            "the directory Triton reads (its --model-repository); required with an S3 store in the shared "
            "repository_mode, refused in object-store",
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
    def object_store_mode(self) -> bool:
        """Triton reads the store itself: the store is the live repository, nothing is copied."""
        return self.repository_mode == REPOSITORY_OBJECT_STORE

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
