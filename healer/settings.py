"""healer's configuration: one YAML file, read once at the edge into frozen, typed settings.

Every error names the file, the key path and what is wrong, e.g.
``examples/bad.yaml: models[1].golden.outputs[0].atol: must be >= 0, got -1``.
Unknown keys are rejected so a typo never silently falls back to a default.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt
import yaml

# Model names and versions become file paths, S3 keys and URL segments: keep them boring.
MODEL_NAME_PATTERN = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}\Z")
# Triton's version directories are positive integers.
VERSION_PATTERN = re.compile(r"^[1-9][0-9]{0,18}\Z")
# The version a rollback names when the failing one was never seen (a model failing before any version
# answered, healer/state.py): it is healed, but it is no Triton version (no files move for it).
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


@dataclass(frozen=True)
class TritonSettings:
    """Where the Triton server's HTTP endpoint is and how long a probe may wait for it."""

    url: str = "127.0.0.1:8000"
    timeout_s: float = 2.0


@dataclass(frozen=True)
class EmbeddedSettings:
    """The embedded default: a real tritonserver started by healer on this machine."""

    model_repository: Path
    startup_timeout_s: float = 60.0
    tritonserver: Path | None = None


@dataclass(frozen=True, eq=False)
class TensorSpec:
    """One golden input or expected output: name, datatype, shape and values."""

    name: str
    datatype: str
    shape: tuple[int, ...]
    values: npt.NDArray[Any]


@dataclass(frozen=True, eq=False)
class ExpectedOutput:
    tensor: TensorSpec
    atol: float = 1e-6
    rtol: float = 1e-5


@dataclass(frozen=True, eq=False)
class GoldenRequest:
    """A request with a known answer: the business tier's evidence that a model is right."""

    inputs: tuple[TensorSpec, ...]
    outputs: tuple[ExpectedOutput, ...]
    latency_slo_ms: float
    timeout_s: float
    input_hash: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "input_hash", hash_inputs(self.inputs))


@dataclass(frozen=True, eq=False)
class ModelSettings:
    name: str
    golden: GoldenRequest
    # None: probe every version Triton currently serves (follows rollbacks).
    version: str | None = None
    # A required model failing, healing or escalated makes the pod not ready (drains it).
    required: bool = True


@dataclass(frozen=True)
class S3Settings:
    bucket: str
    prefix: str = ""
    endpoint_url: str | None = None  # None: AWS; set for MinIO, SeaweedFS, Ceph...
    region: str = "us-east-1"
    connect_timeout_s: float = 3.0
    read_timeout_s: float = 10.0
    # Credentials come from the usual AWS_* environment variables or the pod's IAM role, never from this file.


@dataclass(frozen=True)
class StoreSettings:
    """Where model versions and the stable ledger live: a filesystem/NFS path or S3."""

    filesystem: Path | None = None
    s3: S3Settings | None = None


@dataclass(frozen=True)
class AlertSettings:
    webhook_url: str | None = None  # Alertmanager base URL; alerts go to <url>/api/v2/alerts
    timeout_s: float = 5.0
    runbook_url: str = "https://github.com/healer-dev/healer/blob/main/runbooks/rollback-escalated.md"


@dataclass(frozen=True)
class ArgoSettings:
    host: str = "https://argo-server.argo:2746"
    namespace: str = "ml"  # where the healer-rollback WorkflowTemplate is installed: the Triton namespace
    token_file: Path | None = None  # e.g. a projected service-account token
    verify_ssl: bool = True
    request_timeout_s: float = 5.0
    # The CA that signed argo-server's certificate (Argo's default one is self-signed); None: the
    # system's CAs. Ignored when verify_ssl is false.
    ca_file: Path | None = None


@dataclass(frozen=True)
class ReplicaSettings:
    """Every Triton a rollback must heal: the Running pods matching a label selector (Kubernetes API)."""

    namespace: str
    selector: str  # e.g. app.kubernetes.io/name=triton
    port: int = 8000  # Triton's HTTP port in those pods


ROLLBACK_ORDERS = ("swap", "unload-first")
# rollback.deadline_s at most: the budget is 90 s by design, and the deadline also sizes the rollback's
# lease (deadline + unload + 2 x load + margin, workflows/steps.py) and its workflow's
# activeDeadlineSeconds. A deadline of hours is a typo or a misunderstanding; it would keep a dead
# rollback's lease, and with it every later rollback of that model, for as long. An hour is generous.
MAX_DEADLINE_S = 3600


@dataclass(frozen=True)
class RollbackSettings:
    deadline_s: float = 90.0  # the whole rollback, unload to verified; past it: escalate
    unload_timeout_s: float = 30.0
    load_timeout_s: float = 60.0
    poll_interval_s: float = 0.05
    engine: str = "local"  # local | argo
    # LocalEngine's run records. A relative path resolves against the config file's folder, which
    # in a pod is a read-only ConfigMap: the default is absolute and writable.
    state_dir: Path = Path("/tmp/healer/runs")  # noqa: S108 - a per-pod scratch directory
    argo: ArgoSettings = field(default_factory=ArgoSettings)
    alert: AlertSettings = field(default_factory=AlertSettings)
    # None: heal the Triton the request names (the submitting pod's), or triton.url.
    replicas: ReplicaSettings | None = None
    # swap: load the stable version over the broken one (Triton loads the new version, then releases
    # the old; a failed load keeps the old): the model is never absent. unload-first: for models too
    # large to be resident twice; the model is absent between unload and load.
    order: str = "swap"


@dataclass(frozen=True)
class TierThresholds:
    failure_threshold: int
    success_threshold: int


@dataclass(frozen=True)
class DrainPeers:
    """The pods of this sidecar's replica set (Kubernetes API): its own pod among them."""

    namespace: str
    selector: str  # e.g. app.kubernetes.io/name=triton


@dataclass(frozen=True)
class DrainSettings:
    """Draining never empties the Service (healer/decisions.py ``drain_plan``): the pods that drain
    are admitted one at a time through a drain set in the store (compare-and-swap), so at least
    ``min_ready`` pods stay serving. Exactly one peers source (who is Ready, who is terminating):
    ``peers`` (the Kubernetes API) or ``peer_urls`` (the sidecars' base URLs, this one's included)."""

    min_ready: int = 1  # pods that must stay ready and serving, whatever is broken
    peers: DrainPeers | None = None
    peer_urls: tuple[str, ...] = ()
    settle_s: float = 10.0  # no longer used (the drain set orders admissions): accepted so older files load
    keep_decision_s: float = 60.0  # peers or drain set unreadable: keep a drain this long, then serve
    timeout_s: float = 2.0  # one peer /status read (peer_urls; read in parallel)
    # The drain set's name in the store, shared by the pods of one replica set and by no other set
    # (None: derived from peers' namespace and selector; with peer_urls a file must give it, see
    # _parse_drain, and only settings built in code, e.g. a drill's scratch set, fall back to "default").
    set_name: str | None = None
    store_timeout_s: float = 5.0  # the longest one read-decide-write of the drain set may hold the probe loop

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
            return name if name and name not in {"ledger", "audit", "lease"} else "default"
        return "default"


@dataclass(frozen=True)
class SidecarSettings:
    """The probe sidecar. Production default period: 5 s (a detection in ~15 s with threshold 3)."""

    listen: str = "0.0.0.0:8088"  # the pod's probes and Prometheus reach it from outside
    period_s: float = 5.0
    # Fast confirmation: after a wrong answer, re-probe that model this often (not every period) until
    # business.failure_threshold wrong answers in a row confirm it or a good answer clears it. The rule
    # is unchanged (that many consecutive wrong answers); only the wait between them shrinks. 0: off.
    confirm_interval_s: float = 0.2
    readiness: TierThresholds = TierThresholds(failure_threshold=2, success_threshold=1)
    business: TierThresholds = TierThresholds(failure_threshold=3, success_threshold=2)
    max_rollbacks: int = 3  # circuit breaker: rollbacks per model per window
    window_s: float = 3600.0
    # If the Argo engine cannot take the rollback within this, run it in the pod (LocalEngine).
    argo_submit_timeout_s: float = 5.0
    fallback_to_local: bool = True
    # The longest one engine call (build, submit-or-join, status) may hold the probe loop; past it the
    # call is left to its thread and counted as "maybe delivered" (healer/sidecar.py BoundedCalls).
    engine_call_timeout_s: float = 15.0
    # None: drain on every failing model, as on a single machine; set it for a replica set.
    drain: DrainSettings | None = None
    # The pod's terminationGracePeriodSeconds: after SIGTERM, an in-pod rollback gets part of it to
    # finish, then is cancelled so that it stops cleanly and its exit handler alerts within it.
    termination_grace_s: float = 30.0


@dataclass(frozen=True, eq=False)
class Settings:
    source: str
    triton: TritonSettings
    models: tuple[ModelSettings, ...]
    embedded: EmbeddedSettings | None = None
    store: StoreSettings | None = None
    # The directory Triton reads (its --model-repository). None: the filesystem store itself.
    live_repository: Path | None = None
    rollback: RollbackSettings = field(default_factory=RollbackSettings)
    sidecar: SidecarSettings = field(default_factory=SidecarSettings)

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
    reader = _Reader(source, base_dir)
    root = reader.mapping(
        document,
        "",
        required={"models"},
        optional={"triton", "embedded", "store", "live_repository", "rollback", "sidecar"},
    )
    triton = _parse_triton(reader, root.get("triton") if root.get("triton") is not None else {})
    embedded = _parse_embedded(reader, root["embedded"]) if root.get("embedded") is not None else None
    store = _parse_store(reader, root["store"]) if root.get("store") is not None else None
    live = reader.path(root["live_repository"], "live_repository") if root.get("live_repository") is not None else None
    if store is not None and store.s3 is not None and live is None:
        raise ConfigError(source, "live_repository", "is required with an S3 store (the directory Triton reads)")
    rollback = _parse_rollback(reader, root["rollback"] if root.get("rollback") is not None else {})
    models_raw = reader.sequence(root["models"], "models", min_length=1)
    models = tuple(_parse_model(reader, item, f"models[{i}]") for i, item in enumerate(models_raw))
    seen: dict[str, int] = {}
    for i, model in enumerate(models):
        if model.name in seen:
            raise ConfigError(
                source,
                f"models[{i}].name",
                f"duplicate model {model.name!r} (also models[{seen[model.name]}])",
            )
        seen[model.name] = i
    sidecar_raw = root["sidecar"] if root.get("sidecar") is not None else {}
    settings = Settings(
        source=source,
        triton=triton,
        models=models,
        embedded=embedded,
        store=store,
        live_repository=live,
        rollback=rollback,
        sidecar=_parse_sidecar(reader, sidecar_raw),
    )
    try:
        check_listen(settings)
    except ValueError as exc:
        given = "" if "listen" in sidecar_raw else " (the default)"
        raise ConfigError(source, "sidecar.listen", f"{exc}{given}") from None
    return settings


def _parse_sidecar(reader: _Reader, raw: Any) -> SidecarSettings:
    key = "sidecar"
    data = reader.mapping(
        raw,
        key,
        optional={
            "listen",
            "period_s",
            "confirm_interval_s",
            "readiness",
            "business",
            "max_rollbacks",
            "window_s",
            "argo_submit_timeout_s",
            "fallback_to_local",
            "engine_call_timeout_s",
            "drain",
            "termination_grace_s",
        },
    )
    d = SidecarSettings()
    listen = reader.address(data.get("listen", d.listen), f"{key}.listen", url=False)

    def thresholds(name: str, default: TierThresholds) -> TierThresholds:
        if data.get(name) is None:
            return default
        t = reader.mapping(data[name], f"{key}.{name}", optional={"failure_threshold", "success_threshold"})
        return TierThresholds(
            failure_threshold=reader.integer(
                t.get("failure_threshold", default.failure_threshold), f"{key}.{name}.failure_threshold", minimum=1
            ),
            success_threshold=reader.integer(
                t.get("success_threshold", default.success_threshold), f"{key}.{name}.success_threshold", minimum=1
            ),
        )

    fallback = data.get("fallback_to_local", d.fallback_to_local)
    if not isinstance(fallback, bool):
        raise ConfigError(
            reader.source, f"{key}.fallback_to_local", f"must be true or false, got {_describe(fallback)}"
        )
    period_s = reader.number(data.get("period_s", d.period_s), f"{key}.period_s", minimum=0.05)
    confirm_interval_s = reader.number(
        data.get("confirm_interval_s", d.confirm_interval_s), f"{key}.confirm_interval_s", minimum=0
    )
    if 0 < confirm_interval_s < 0.05 or confirm_interval_s > period_s:
        raise ConfigError(
            reader.source,
            f"{key}.confirm_interval_s",
            f"must be 0 (off) or between 0.05 and period_s ({period_s:g}), got {confirm_interval_s:g}",
        )
    return SidecarSettings(
        listen=listen,
        period_s=period_s,
        confirm_interval_s=confirm_interval_s,
        readiness=thresholds("readiness", d.readiness),
        business=thresholds("business", d.business),
        max_rollbacks=reader.integer(data.get("max_rollbacks", d.max_rollbacks), f"{key}.max_rollbacks", minimum=1),
        window_s=reader.number(data.get("window_s", d.window_s), f"{key}.window_s", minimum=1),
        argo_submit_timeout_s=reader.number(
            data.get("argo_submit_timeout_s", d.argo_submit_timeout_s), f"{key}.argo_submit_timeout_s", minimum=0.1
        ),
        fallback_to_local=fallback,
        engine_call_timeout_s=reader.number(
            data.get("engine_call_timeout_s", d.engine_call_timeout_s), f"{key}.engine_call_timeout_s", minimum=0.01
        ),
        drain=_parse_drain(reader, data["drain"]) if data.get("drain") is not None else None,
        termination_grace_s=reader.number(
            data.get("termination_grace_s", d.termination_grace_s), f"{key}.termination_grace_s", minimum=1
        ),
    )


def _parse_drain(reader: _Reader, raw: Any) -> DrainSettings:
    key = "sidecar.drain"
    data = reader.mapping(
        raw,
        key,
        optional={
            "min_ready",
            "peers",
            "peer_urls",
            "settle_s",
            "keep_decision_s",
            "timeout_s",
            "set",
            "store_timeout_s",
        },
    )
    if (data.get("peers") is None) == (data.get("peer_urls") is None):
        raise ConfigError(reader.source, key, "needs exactly one of 'peers' (Kubernetes) or 'peer_urls'")
    d = DrainSettings()
    peers = None
    if data.get("peers") is not None:
        p = reader.mapping(data["peers"], f"{key}.peers", required={"namespace", "selector"})
        peers = DrainPeers(
            namespace=reader.string(p["namespace"], f"{key}.peers.namespace"),
            selector=reader.string(p["selector"], f"{key}.peers.selector"),
        )
    urls = []
    for i, url in enumerate(reader.sequence(data.get("peer_urls") or [], f"{key}.peer_urls")):
        urls.append(reader.address(url, f"{key}.peer_urls[{i}]", url=True).rstrip("/"))
    if data.get("peer_urls") is not None and not urls:
        raise ConfigError(reader.source, f"{key}.peer_urls", "must list at least one sidecar URL")
    # With peer_urls the file must name the drain set. Nothing in it says which replica set this is:
    # a fixed name ("default", as before) is shared by every such set writing to the store, and one
    # set's writer prunes the other's drained pod (not among its peers), so the other's second pod
    # drains too. A name derived from the URLs would differ between sets, but it changes with the
    # list: while a rollout changes peer_urls, old and new pods of one set would use two drain sets and
    # could both drain. Only a person knows the set's lasting name. (With peers, namespace and
    # selector are the set's identity and stay put as it scales: the name is derived from them.)
    if urls and data.get("set") is None:
        raise ConfigError(
            reader.source,
            f"{key}.set",
            "is required with peer_urls: name the replica set's drain set (the same name in every pod of "
            "the set, a different one in every other set sharing the store); `set: default` keeps the set "
            "these pods used before this was required, so a rolling upgrade does not split it in two",
        )
    return DrainSettings(
        min_ready=reader.integer(data.get("min_ready", d.min_ready), f"{key}.min_ready", minimum=1),
        peers=peers,
        peer_urls=tuple(urls),
        settle_s=reader.number(data.get("settle_s", d.settle_s), f"{key}.settle_s", minimum=0),
        keep_decision_s=reader.number(
            data.get("keep_decision_s", d.keep_decision_s), f"{key}.keep_decision_s", minimum=0
        ),
        timeout_s=reader.number(data.get("timeout_s", d.timeout_s), f"{key}.timeout_s", minimum=0.001),
        set_name=_drain_set_name(reader, data.get("set")),
        store_timeout_s=reader.number(
            data.get("store_timeout_s", d.store_timeout_s), f"{key}.store_timeout_s", minimum=0.01
        ),
    )


def _drain_set_name(reader: _Reader, raw: Any) -> str | None:
    if raw is None:
        return None
    name = reader.string(raw, "sidecar.drain.set")
    if (
        not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}", name)
        or ".." in name
        or name in {"ledger", "audit", "lease"}
    ):
        raise ConfigError(
            reader.source, "sidecar.drain.set", f"must be a name ([A-Za-z0-9_.-], not ledger/audit/lease), got {name!r}"
        )
    return name


def _parse_store(reader: _Reader, raw: Any) -> StoreSettings:
    data = reader.mapping(raw, "store", optional={"filesystem", "s3"})
    if ("filesystem" in data) == ("s3" in data):
        raise ConfigError(reader.source, "store", "needs exactly one of 'filesystem' or 's3'")
    if "filesystem" in data:
        fs = reader.mapping(data["filesystem"], "store.filesystem", required={"root"})
        return StoreSettings(filesystem=reader.path(fs["root"], "store.filesystem.root"))
    s3 = reader.mapping(
        data["s3"],
        "store.s3",
        required={"bucket"},
        optional={"prefix", "endpoint_url", "region", "connect_timeout_s", "read_timeout_s"},
    )
    defaults = S3Settings(bucket="-")
    endpoint = s3.get("endpoint_url")
    if endpoint is not None:
        endpoint = reader.address(endpoint, "store.s3.endpoint_url", url=True)
    return StoreSettings(
        s3=S3Settings(
            bucket=reader.string(s3["bucket"], "store.s3.bucket"),
            prefix=reader.string(s3["prefix"], "store.s3.prefix").strip("/") if s3.get("prefix") else "",
            endpoint_url=endpoint,
            region=reader.string(s3.get("region", defaults.region), "store.s3.region"),
            connect_timeout_s=reader.number(
                s3.get("connect_timeout_s", defaults.connect_timeout_s), "store.s3.connect_timeout_s", minimum=0.001
            ),
            read_timeout_s=reader.number(
                s3.get("read_timeout_s", defaults.read_timeout_s), "store.s3.read_timeout_s", minimum=0.001
            ),
        )
    )


def _parse_rollback(reader: _Reader, raw: Any) -> RollbackSettings:
    key = "rollback"
    data = reader.mapping(
        raw,
        key,
        optional={
            "deadline_s",
            "unload_timeout_s",
            "load_timeout_s",
            "poll_interval_s",
            "engine",
            "state_dir",
            "argo",
            "alert",
            "replicas",
            "order",
        },
    )
    d = RollbackSettings()
    order = reader.string(data.get("order", d.order), f"{key}.order")
    if order not in ROLLBACK_ORDERS:
        raise ConfigError(reader.source, f"{key}.order", f"must be 'swap' or 'unload-first', got {order!r}")
    replicas = None
    if data.get("replicas") is not None:
        r = reader.mapping(data["replicas"], f"{key}.replicas", required={"namespace", "selector"}, optional={"port"})
        port = reader.integer(r.get("port", 8000), f"{key}.replicas.port", minimum=1)
        if port > 65535:
            raise ConfigError(reader.source, f"{key}.replicas.port", f"must be <= 65535, got {port}")
        replicas = ReplicaSettings(
            namespace=reader.string(r["namespace"], f"{key}.replicas.namespace"),
            selector=reader.string(r["selector"], f"{key}.replicas.selector"),
            port=port,
        )
    engine = reader.string(data.get("engine", d.engine), f"{key}.engine")
    if engine not in {"local", "argo"}:
        raise ConfigError(reader.source, f"{key}.engine", f"must be 'local' or 'argo', got {engine!r}")
    argo = d.argo
    if data.get("argo") is not None:
        a = reader.mapping(
            data["argo"],
            f"{key}.argo",
            optional={"host", "namespace", "token_file", "verify_ssl", "request_timeout_s", "ca_file"},
        )
        host = reader.address(a.get("host", argo.host), f"{key}.argo.host", url=True)
        verify = a.get("verify_ssl", argo.verify_ssl)
        if not isinstance(verify, bool):
            raise ConfigError(
                reader.source, f"{key}.argo.verify_ssl", f"must be true or false, got {_describe(verify)}"
            )
        argo = ArgoSettings(
            host=host,
            namespace=reader.string(a.get("namespace", argo.namespace), f"{key}.argo.namespace"),
            token_file=reader.path(a["token_file"], f"{key}.argo.token_file") if a.get("token_file") else None,
            verify_ssl=verify,
            request_timeout_s=reader.number(
                a.get("request_timeout_s", argo.request_timeout_s), f"{key}.argo.request_timeout_s", minimum=0.001
            ),
            ca_file=reader.path(a["ca_file"], f"{key}.argo.ca_file") if a.get("ca_file") else None,
        )
    alert = d.alert
    if data.get("alert") is not None:
        al = reader.mapping(data["alert"], f"{key}.alert", optional={"webhook_url", "timeout_s", "runbook_url"})
        url = al.get("webhook_url")
        alert = AlertSettings(
            webhook_url=reader.address(url, f"{key}.alert.webhook_url", url=True) if url is not None else None,
            timeout_s=reader.number(al.get("timeout_s", alert.timeout_s), f"{key}.alert.timeout_s", minimum=0.001),
            runbook_url=reader.address(al.get("runbook_url", alert.runbook_url), f"{key}.alert.runbook_url", url=True),
        )
    deadline_s = reader.number(data.get("deadline_s", d.deadline_s), f"{key}.deadline_s", minimum=1)
    if deadline_s > MAX_DEADLINE_S:
        raise ConfigError(
            reader.source,
            f"{key}.deadline_s",
            f"must be at most {MAX_DEADLINE_S} s (a rollback's budget is 90 s by design; its lease and its "
            f"workflow last about this long), got {deadline_s:g}",
        )

    phases = {
        name: reader.number(data.get(name, default), f"{key}.{name}", minimum=0.1)
        for name, default in (("unload_timeout_s", d.unload_timeout_s), ("load_timeout_s", d.load_timeout_s))
    }
    # Each is one phase of the rollback: longer than the whole of it is a contradiction. A key the
    # file gives is named before a default it contradicts.
    late = sorted((n for n, v in phases.items() if v > deadline_s), key=lambda n: n not in data)
    if late:
        name = late[0]
        raise ConfigError(
            reader.source,
            f"{key}.{name}",
            f"must be at most {key}.deadline_s ({deadline_s:g} s): the {name.split('_')[0]} is part of the "
            f"rollback, got {phases[name]:g}{'' if name in data else ' (the default)'}",
        )
    return RollbackSettings(
        deadline_s=deadline_s,
        unload_timeout_s=phases["unload_timeout_s"],
        load_timeout_s=phases["load_timeout_s"],
        poll_interval_s=reader.number(
            data.get("poll_interval_s", d.poll_interval_s), f"{key}.poll_interval_s", minimum=0.001
        ),
        engine=engine,
        state_dir=reader.path(data.get("state_dir") or str(d.state_dir), f"{key}.state_dir"),
        argo=argo,
        alert=alert,
        replicas=replicas,
        order=order,
    )


def _parse_triton(reader: _Reader, raw: Any) -> TritonSettings:
    data = reader.mapping(raw, "triton", optional={"url", "timeout_s"})
    defaults = TritonSettings()
    url = reader.address(data.get("url", defaults.url), "triton.url", url=False)
    timeout_s = reader.number(data.get("timeout_s", defaults.timeout_s), "triton.timeout_s", minimum=0.001)
    return TritonSettings(url=url, timeout_s=timeout_s)


def _parse_embedded(reader: _Reader, raw: Any) -> EmbeddedSettings:
    data = reader.mapping(
        raw,
        "embedded",
        required={"model_repository"},
        optional={"startup_timeout_s", "tritonserver"},
    )
    repository = reader.path(data["model_repository"], "embedded.model_repository")
    tritonserver = data.get("tritonserver")
    return EmbeddedSettings(
        model_repository=repository,
        startup_timeout_s=reader.number(data.get("startup_timeout_s", 60.0), "embedded.startup_timeout_s", minimum=1),
        tritonserver=reader.path(tritonserver, "embedded.tritonserver") if tritonserver is not None else None,
    )


def _parse_model(reader: _Reader, raw: Any, key: str) -> ModelSettings:
    data = reader.mapping(raw, key, required={"name", "golden"}, optional={"version", "required"})
    name = reader.string(data["name"], f"{key}.name")
    if not MODEL_NAME_PATTERN.match(name) or ".." in name:
        raise ConfigError(
            reader.source,
            f"{key}.name",
            "must be 1-128 characters of letters, digits, '_', '.', '-', not start with '.' or '-' "
            f"and contain no '..' (it becomes a path and a URL), got {name!r}",
        )
    version: str | None = None
    if data.get("version") is not None:
        raw_version = data["version"]
        version = str(raw_version) if isinstance(raw_version, int) and not isinstance(raw_version, bool) else None
        if version is None:
            version = reader.string(raw_version, f"{key}.version")
        if not VERSION_PATTERN.match(version):
            raise ConfigError(
                reader.source,
                f"{key}.version",
                f"must be a positive integer (Triton version directories are numbers), got {raw_version!r}",
            )
    golden = _parse_golden(reader, data["golden"], f"{key}.golden")
    required = data.get("required", True)
    if not isinstance(required, bool):
        raise ConfigError(reader.source, f"{key}.required", f"must be true or false, got {_describe(required)}")
    return ModelSettings(name=name, version=version, golden=golden, required=required)


def _parse_golden(reader: _Reader, raw: Any, key: str) -> GoldenRequest:
    data = reader.mapping(raw, key, required={"inputs", "outputs", "latency_slo_ms"}, optional={"timeout_s"})
    inputs = tuple(
        _parse_tensor(reader, item, f"{key}.inputs[{i}]", extra=set())[0]
        for i, item in enumerate(reader.sequence(data["inputs"], f"{key}.inputs", min_length=1))
    )
    _reject_duplicate_names(reader, [t.name for t in inputs], f"{key}.inputs")
    outputs = []
    for i, item in enumerate(reader.sequence(data["outputs"], f"{key}.outputs", min_length=1)):
        out_key = f"{key}.outputs[{i}]"
        tensor, extra = _parse_tensor(reader, item, out_key, extra={"atol", "rtol"})
        # Integers and booleans (class ids, token ids, flags) compare exactly unless a tolerance is given.
        exact = np.dtype(DATATYPES[tensor.datatype]).kind in "biuO"
        atol = reader.number(extra.get("atol", 0.0 if exact else 1e-6), f"{out_key}.atol", minimum=0)
        rtol = reader.number(extra.get("rtol", 0.0 if exact else 1e-5), f"{out_key}.rtol", minimum=0)
        outputs.append(ExpectedOutput(tensor=tensor, atol=atol, rtol=rtol))
    _reject_duplicate_names(reader, [o.tensor.name for o in outputs], f"{key}.outputs")
    latency_slo_ms = reader.number(data["latency_slo_ms"], f"{key}.latency_slo_ms", minimum=0.001)
    timeout_s = reader.number(data.get("timeout_s", 5.0), f"{key}.timeout_s", minimum=0.001)
    if timeout_s * 1000 < latency_slo_ms:
        raise ConfigError(
            reader.source,
            f"{key}.timeout_s",
            f"must be at least the latency SLO ({latency_slo_ms} ms), got {timeout_s} s",
        )
    return GoldenRequest(inputs=inputs, outputs=tuple(outputs), latency_slo_ms=latency_slo_ms, timeout_s=timeout_s)


def _reject_duplicate_names(reader: _Reader, names: list[str], key: str) -> None:
    seen: set[str] = set()
    for i, name in enumerate(names):
        if name in seen:
            raise ConfigError(reader.source, f"{key}[{i}].name", f"duplicate tensor name {name!r}")
        seen.add(name)


def _parse_tensor(reader: _Reader, raw: Any, key: str, *, extra: set[str]) -> tuple[TensorSpec, dict[str, Any]]:
    data = reader.mapping(raw, key, required={"name", "datatype", "shape"}, optional={"data", "file"} | extra)
    name = reader.string(data["name"], f"{key}.name")
    datatype = reader.string(data["datatype"], f"{key}.datatype")
    if datatype not in DATATYPES:
        raise ConfigError(reader.source, f"{key}.datatype", f"must be one of {', '.join(DATATYPES)}, got {datatype!r}")
    shape_raw = reader.sequence(data["shape"], f"{key}.shape", min_length=1)
    shape = tuple(reader.integer(dim, f"{key}.shape[{i}]", minimum=0) for i, dim in enumerate(shape_raw))
    if ("data" in data) == ("file" in data):
        raise ConfigError(reader.source, key, "needs exactly one of 'data' (inline values) or 'file'")
    if "file" in data:
        values = _load_tensor_file(reader, data["file"], f"{key}.file")
        value_key = f"{key}.file"
    else:
        values = data["data"]
        value_key = f"{key}.data"
    array = _to_array(reader, values, datatype, shape, value_key)
    return TensorSpec(name=name, datatype=datatype, shape=shape, values=array), {
        k: v for k, v in data.items() if k in extra
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
    ) -> dict[str, Any]:
        if not isinstance(raw, dict):
            raise self.fail(key or "(top level)", f"must be a mapping, got {_describe(raw)}")
        prefix = f"{key}." if key else ""
        for name in raw:
            if name not in required and name not in optional:
                allowed = ", ".join(sorted(required | optional))
                raise self.fail(f"{prefix}{name}", f"unknown key (allowed here: {allowed})")
        for name in sorted(required):
            if name not in raw:
                raise self.fail(f"{prefix}{name}", "is required")
        return raw

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

    def integer(self, raw: Any, key: str, *, minimum: int) -> int:
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
