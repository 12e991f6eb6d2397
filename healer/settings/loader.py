"""The loader: healer.yaml read into ``Settings``, each section by its declaration, then the rules
that tie a section's keys together. Every error names the file, the key path and the problem."""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import yaml

from healer.settings.addresses import parse_address
from healer.settings.expect import Expect
from healer.settings.expect_rules import build_expect, check_expect_fits
from healer.settings.reader import Reader, describe, without_extension_fields
from healer.settings.schema import ConfigError, DeclaredKey, Setting, declared_keys, is_section
from healer.settings.sections import (
    ENDPOINT_INFER,
    ENDPOINT_STREAM,
    REPOSITORY_OBJECT_STORE,
    REPOSITORY_SHARED,
    RESERVED_SET_NAMES,
    STREAM_KEYS,
    DrainSettings,
    ExpectedOutput,
    FrozenParameters,
    GoldenRequest,
    ModelSettings,
    OutputTensor,
    ReplicaSettings,
    RollbackSettings,
    S3Settings,
    Settings,
    SidecarSettings,
    StoreSettings,
    TensorSpec,
    TracingSettings,
)
from healer.settings.tensors import load_tensor_file, to_array
from healer.settings.yaml12 import give_back_freed_memory, load_yaml
from healer.vocabulary import DATATYPES, MODEL_NAME_PATTERN, VERSION_PATTERN

T = TypeVar("T")


# A Triton on this machine binds every address of its port by default (--http-address 0.0.0.0).
_WILDCARD_HOSTS = frozenset({"0.0.0.0", "::", "*"})  # noqa: S104 - host names compared, nothing bound
_LOOPBACK_HOSTS = frozenset({"localhost", "ip6-localhost", "::1"})


def check_listen(settings: Settings, listen: str | None = None) -> None:
    """ValueError unless the sidecar can listen at ``listen`` (default: sidecar.listen; `healer sidecar
    --listen`): host:port, and not Triton's own port. That is triton.url's port when that Triton runs on this
    machine (a loopback or wildcard host: it binds every address) or at the same host, and
    rollback.replicas.port, Triton's port in the pods the sidecar runs in. healer.yaml names no gRPC or
    metrics port of Triton: there is nothing else to compare with."""
    listen = settings.sidecar.listen if listen is None else listen
    triton_url = settings.triton.url
    replicas = settings.rollback.replicas
    # With addresses each Triton's port is in its address, and no sidecar runs beside it in a pod of ours.
    replicas_port = replicas.port if replicas is not None and replicas.pod_query is not None else None
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
        document = load_yaml(text, source)
    except yaml.YAMLError as exc:
        raise ConfigError(source, "", f"not valid YAML: {exc}") from exc
    except RecursionError as exc:  # the depth check should stop this first; never a traceback all the same
        raise ConfigError(source, "", "nested too deeply to read") from exc
    try:
        settings = parse_settings(document, source=source, base_dir=path.parent)
    except RecursionError as exc:
        raise ConfigError(source, "", "nested too deeply to read") from exc
    del text, document  # only the settings are kept
    give_back_freed_memory()
    return settings


def parse_settings(document: Any, *, source: str, base_dir: Path) -> Settings:
    settings: Settings = parse_section(Settings, without_extension_fields(document), source=source, base_dir=base_dir)
    return settings


def parse_section(cls: type[T], document: Any, *, source: str, base_dir: Path, key: str = "") -> T:
    """A settings section read from its YAML mapping at ``key`` by its declaration (parse_settings:
    the whole file). Raises ConfigError naming ``source``, the key path and the problem."""
    section: T = _section(Reader(source, base_dir), cls, document, key, None)
    return section


def _section(reader: Reader, cls: type[Any], raw: Any, key: str, default: Any) -> Any:
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


def _value(reader: Reader, d: DeclaredKey, kind: Any, raw: Any, path: str, fallback: Any) -> Any:
    spec = d.spec
    if spec.under is not None:
        raw = reader.mapping(raw, path, required={spec.under})[spec.under]
        path = f"{path}.{spec.under}"
    if is_section(kind):
        return _section(reader, kind, raw, path, fallback if is_section(type(fallback)) else None)
    if kind is tuple:
        if spec.one_or_list and isinstance(raw, Mapping):  # one item written alone: its key has no [0]
            return (_value(reader, d, d.item, raw, path, None),)
        if spec.one_or_list and not isinstance(raw, list):
            raise reader.fail(path, f"must be a mapping (one) or a list of them, got {describe(raw)}")
        items = reader.sequence(raw, path, min_length=spec.min_items)
        return tuple(_value(reader, d, d.item, item, f"{path}[{i}]", None) for i, item in enumerate(items))
    return _scalar_value(reader, spec, kind, raw, path)


def _scalar_value(reader: Reader, spec: Setting, kind: Any, raw: Any, path: str) -> Any:
    if kind is bool:
        if not isinstance(raw, bool):
            raise reader.fail(path, f"must be true or false, got {describe(raw)}")
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


def _read_form(reader: Reader, form: str, raw: Any, key: str) -> str:
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


def _build_settings(reader: Reader, key: str, data: dict[str, Any], values: dict[str, Any]) -> Settings:
    _check_repository_mode(reader, values)
    seen: dict[str, int] = {}
    for i, model in enumerate(values["models"]):
        if model.name in seen:
            raise reader.fail(f"models[{i}].name", f"duplicate model {model.name!r} (also models[{seen[model.name]}])")
        seen[model.name] = i
        if model.golden_in_store and values["store"] is None:
            raise reader.fail(f"models[{i}].golden_in_store", "needs a store: the requests are read from it")
    settings = Settings(source=reader.source, **values)
    try:
        check_listen(settings)
    except ValueError as exc:
        given = "" if "listen" in (data.get("sidecar") or {}) else " (the default)"
        raise reader.fail("sidecar.listen", f"{exc}{given}") from None
    return settings


def _check_repository_mode(reader: Reader, values: dict[str, Any]) -> None:
    """repository_mode against store and live_repository: object-store needs a store and no
    live_repository (Triton reads the store itself); shared needs live_repository with an S3 store
    (the directory Triton reads); per-pod needs neither (each pod's sidecar stages its own copy)."""
    store: StoreSettings | None = values["store"]
    mode = values["repository_mode"]
    if mode == REPOSITORY_OBJECT_STORE:
        if store is None:
            raise reader.fail("store", f"is required with repository_mode {mode!r} (the store Triton reads)")
        if values["live_repository"] is not None:
            raise reader.fail(
                "live_repository",
                f"must not be set with repository_mode {mode!r}: Triton reads the store itself, nothing is copied "
                f"(got {str(values['live_repository'])!r})",
            )
    elif mode == REPOSITORY_SHARED and store is not None and store.s3 is not None and values["live_repository"] is None:
        raise reader.fail("live_repository", "is required with an S3 store (the directory Triton reads)")


def _build_sidecar(reader: Reader, key: str, data: dict[str, Any], values: dict[str, Any]) -> SidecarSettings:
    period_s, confirm_interval_s = values["period_s"], values["confirm_interval_s"]
    if 0 < confirm_interval_s < 0.05 or confirm_interval_s > period_s:
        raise reader.fail(
            f"{key}.confirm_interval_s",
            f"must be 0 (off) or between 0.05 and period_s ({period_s:g}), got {confirm_interval_s:g}",
        )
    return SidecarSettings(**values)


def _check_drain(reader: Reader, key: str, data: dict[str, Any]) -> None:
    if (data.get("peers") is None) == (data.get("peer_urls") is None):
        raise reader.fail(key, "needs exactly one of 'peers' (Kubernetes) or 'peer_urls'")


def _build_drain(reader: Reader, key: str, data: dict[str, Any], values: dict[str, Any]) -> DrainSettings:
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


def _check_replicas(reader: Reader, key: str, data: dict[str, Any]) -> None:
    if (data.get("selector") is None) == (data.get("addresses") is None):
        raise reader.fail(key, "needs exactly one of 'selector' (Kubernetes pods) or 'addresses' (a list of Tritons)")
    if data.get("selector") is not None and data.get("namespace") is None:
        raise reader.fail(f"{key}.namespace", "is required with selector (the namespace the pods are listed in)")
    for name in ("namespace", "port"):
        if data.get("addresses") is not None and name in data:
            raise reader.fail(
                f"{key}.{name}", "applies to selector only: with addresses each Triton is given as host:port"
            )


def _build_replicas(reader: Reader, key: str, data: dict[str, Any], values: dict[str, Any]) -> ReplicaSettings:
    raw = data.get("addresses")
    tritons: list[str] = []
    sidecars: list[str] = []
    seen: dict[tuple[str, int | None], int] = {}
    for i, item in enumerate([] if raw is None else reader.sequence(raw, f"{key}.addresses", min_length=1)):
        path = f"{key}.addresses[{i}]"
        triton, sidecar = _replica_entry(reader, item, path)
        host, port = parse_address(triton, url=False)
        same = (host.lower(), port)  # one Triton listed twice would be restored twice, in one wave
        if same in seen:
            where = f"{path}.triton" if isinstance(item, dict) else path
            raise reader.fail(where, f"duplicate Triton {triton!r} (also addresses[{seen[same]}])")
        seen[same] = i
        tritons.append(triton)
        sidecars.append(sidecar)
    named = tuple(sidecars) if any(sidecars) else ()
    return ReplicaSettings(**values, addresses=tuple(tritons), sidecars=named)


def _replica_entry(reader: Reader, item: Any, path: str) -> tuple[str, str]:
    """(Triton, its sidecar or "") of one entry of rollback.replicas.addresses: host:port, or a mapping
    {triton: host:port, sidecar: host:port}."""
    if not isinstance(item, dict):
        return _read_form(reader, "address", item, path), ""
    entry = reader.mapping(item, path, required={"triton"}, optional={"sidecar"})
    triton = _read_form(reader, "address", entry["triton"], f"{path}.triton")
    if entry.get("sidecar") is None:
        return triton, ""
    sidecar = _read_form(reader, "address", entry["sidecar"], f"{path}.sidecar")
    if parse_address(sidecar, url=False) == parse_address(triton, url=False):
        raise reader.fail(
            f"{path}.sidecar", f"is the Triton's own address ({triton!r}): name the healer sidecar beside it"
        )
    return triton, sidecar


def _check_store(reader: Reader, key: str, data: dict[str, Any]) -> None:
    if ("filesystem" in data) == ("s3" in data):  # given, even as null: each then says what it lacks
        raise reader.fail(key, "needs exactly one of 'filesystem' or 's3'")


def _build_s3(reader: Reader, key: str, data: dict[str, Any], values: dict[str, Any]) -> S3Settings:
    return S3Settings(**{**values, "prefix": values["prefix"].strip("/")})


def _build_rollback(reader: Reader, key: str, data: dict[str, Any], values: dict[str, Any]) -> RollbackSettings:
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


def _build_tracing(reader: Reader, key: str, data: dict[str, Any], values: dict[str, Any]) -> TracingSettings:
    if values["enabled"] and not values["otlp_endpoint"]:
        raise reader.fail(f"{key}.otlp_endpoint", "is required when tracing is enabled")
    template = values["ui_link_template"]
    if template is not None and "{trace_id}" not in template:
        raise reader.fail(
            f"{key}.ui_link_template", f"must contain {{trace_id}} where the trace's id goes, got {template!r}"
        )
    return TracingSettings(**values)


def _build_golden(reader: Reader, key: str, data: dict[str, Any], values: dict[str, Any]) -> GoldenRequest:
    _reject_duplicate_names(reader, [t.name for t in values["inputs"]], f"{key}.inputs")
    _reject_duplicate_names(reader, [o.tensor.name for o in values["outputs"]], f"{key}.outputs")
    latency_slo_ms, timeout_s = values["latency_slo_ms"], values["timeout_s"]
    if timeout_s * 1000 < latency_slo_ms:
        raise reader.fail(
            f"{key}.timeout_s", f"must be at least the latency SLO ({latency_slo_ms} ms), got {timeout_s} s"
        )
    parameters = _parameters(reader, data.get("parameters"), f"{key}.parameters")
    _check_endpoint(reader, key, data, values)
    return GoldenRequest(**values, parameters=parameters)


def _parameters(reader: Reader, raw: Any, key: str) -> Mapping[str, str | int | float | bool]:
    """A golden request's parameters: names to a string, number or true/false, passed through as written."""
    if raw is None:
        return FrozenParameters({})
    if not isinstance(raw, dict):
        raise reader.fail(key, f"must be a mapping of parameter names to values, got {describe(raw)}")
    for name, value in raw.items():
        if not isinstance(name, str) or not name:
            raise reader.fail(key, f"parameter names must be non-empty strings, got {describe(name)}")
        if not isinstance(value, str | int | float | bool) or (isinstance(value, float) and not math.isfinite(value)):
            raise reader.fail(
                f"{key}.{name}",
                f"must be a string, a finite number or true/false (sent as JSON), got {describe(value)}",
            )
    return FrozenParameters(raw)


def _check_endpoint(reader: Reader, key: str, data: dict[str, Any], values: dict[str, Any]) -> None:
    """The stream's keys only with generate_stream, within timeout_s and each SLO within the stall limit; with
    generate and generate_stream, inputs a JSON body can carry and stream outputs of one value."""
    endpoint = values["endpoint"]
    if endpoint == ENDPOINT_STREAM:
        _check_stream_timing(reader, key, values)
    else:
        given = [name for name in STREAM_KEYS if data.get(name) is not None]
        if given:
            raise reader.fail(
                f"{key}.{given[0]}",
                f"judges a stream's events: it applies to endpoint {ENDPOINT_STREAM} only, got endpoint {endpoint}",
            )
    if endpoint != ENDPOINT_INFER:
        _check_json_tensors(reader, key, values)


def _check_stream_timing(reader: Reader, key: str, values: dict[str, Any]) -> None:
    stall_s, timeout_s = values["stall_s"], values["timeout_s"]
    if stall_s is not None and stall_s > timeout_s:
        raise reader.fail(f"{key}.stall_s", f"must be at most timeout_s ({timeout_s:g} s), got {stall_s:g}")
    stall_ms = (stall_s if stall_s is not None else timeout_s) * 1000
    for name in ("first_token_slo_ms", "inter_token_slo_ms"):
        slo = values[name]
        if slo is not None and slo > stall_ms:
            limit = "stall_s" if stall_s is not None else "timeout_s (the stall limit when stall_s is not given)"
            raise reader.fail(
                f"{key}.{name}",
                f"must be at most {limit} ({stall_ms:g} ms): a gap that long is a hang, never slow; got {slo:g}",
            )


def _check_json_tensors(reader: Reader, key: str, values: dict[str, Any]) -> None:
    endpoint = values["endpoint"]
    for i, tensor in enumerate(values["inputs"]):
        if len(tensor.shape) > 1:
            raise reader.fail(
                f"{key}.inputs[{i}].shape",
                f"with endpoint {endpoint} an input is a JSON field, one value or a list: one dimension, "
                f"got {list(tensor.shape)}",
            )
        if tensor.values.dtype.kind in "fc" and not np.isfinite(tensor.values).all():
            raise reader.fail(
                f"{key}.inputs[{i}].data", f"with endpoint {endpoint} the values are sent as JSON: no NaN or Inf"
            )
    if endpoint != ENDPOINT_STREAM:
        return
    for i, output in enumerate(values["outputs"]):
        shape = output.tensor.shape
        if output.tensor.datatype == "BYTES" and shape is not None and list(shape) not in ([1], [-1]):
            raise reader.fail(
                f"{key}.outputs[{i}].shape",
                f"a stream's text is its events' texts concatenated, one value: [1], [-1] or left out, "
                f"got {list(shape)}",
            )


def _reject_duplicate_names(reader: Reader, names: list[str], key: str) -> None:
    seen: set[str] = set()
    for i, name in enumerate(names):
        if name in seen:
            raise reader.fail(f"{key}[{i}].name", f"duplicate tensor name {name!r}")
        seen.add(name)


def _build_output(reader: Reader, key: str, data: dict[str, Any], values: dict[str, Any]) -> ExpectedOutput:
    tensor, expect = values["tensor"], values["expect"]
    if expect is None:
        if "data" not in data and "file" not in data:
            raise reader.fail(key, "needs exactly one of 'data' (inline values) or 'file', or an 'expect'")
        if tensor.shape is None:
            raise reader.fail(f"{key}.shape", "is required with data or file")
    else:
        check_expect_fits(reader, key, expect, tensor, given_values="data" in data or "file" in data)
    # Integers and booleans (class ids, token ids, flags) compare exactly unless a tolerance is given.
    if np.dtype(DATATYPES[tensor.datatype]).kind in "biuO":
        values = {**values, **{name: 0.0 for name in ("atol", "rtol") if name not in data}}
    return ExpectedOutput(**values)


def _build_output_tensor(reader: Reader, key: str, data: dict[str, Any], values: dict[str, Any]) -> OutputTensor:
    if "data" in data and "file" in data:
        raise reader.fail(key, "needs exactly one of 'data' (inline values) or 'file', not both")
    if "data" not in data and "file" not in data:
        return OutputTensor(**values)
    shape = values["shape"]
    value_key = f"{key}.file" if "file" in data else f"{key}.data"
    if shape is None:
        raise reader.fail(f"{key}.shape", "is required with data or file")
    if any(d < 0 for d in shape):
        raise reader.fail(f"{key}.shape", f"-1 takes any size only without data or file, got {list(shape)}")
    raw = load_tensor_file(reader, data["file"], value_key) if "file" in data else data["data"]
    return OutputTensor(**{**values, "values": to_array(reader, raw, values["datatype"], shape, value_key)})


def _build_model(reader: Reader, key: str, data: dict[str, Any], values: dict[str, Any]) -> ModelSettings:
    listed = isinstance(data.get("golden"), list)
    suite: list[GoldenRequest] = []
    seen: dict[str, int] = {}
    for i, request in enumerate(values["suite"]):
        at = f"{key}.golden[{i}]" if listed else f"{key}.golden"
        name = request.name or (f"golden[{i}]" if listed else "golden")
        if name in seen:
            raise reader.fail(f"{at}.name", f"duplicate golden request name {name!r} (also golden[{seen[name]}])")
        seen[name] = i
        suite.append(request if request.name else dataclasses.replace(request, name=name))
    calls, model = values["calls"], values["name"]
    for i, called in enumerate(calls):  # a BLS model's composing models: each once, never the model itself
        if called == model or called in calls[:i]:
            why = "names the model itself" if called == model else f"duplicate (also calls[{calls.index(called)}])"
            raise reader.fail(f"{key}.calls[{i}]", f"{why}: {called!r}; a pipeline calls other models, each once")
    return ModelSettings(
        name=values["name"],
        suite=tuple(suite),
        version=values["version"],
        required=values["required"],
        listed=listed,
        golden_in_store=values["golden_in_store"],
        calls=calls,
        mode=values["mode"],
        agreement=values["agreement"],
    )


def _build_tensor(reader: Reader, key: str, data: dict[str, Any], values: dict[str, Any]) -> TensorSpec:
    if ("data" in data) == ("file" in data):
        raise reader.fail(key, "needs exactly one of 'data' (inline values) or 'file'")
    if "file" in data:
        raw = load_tensor_file(reader, data["file"], f"{key}.file")
        value_key = f"{key}.file"
    else:
        raw = data["data"]
        value_key = f"{key}.data"
    array = to_array(reader, raw, values["datatype"], values["shape"], value_key)
    return TensorSpec(**values, values=array)


_CHECK: Mapping[type, Callable[[Reader, str, dict[str, Any]], None]] = {
    DrainSettings: _check_drain,
    ReplicaSettings: _check_replicas,
    StoreSettings: _check_store,
}
_BUILD: Mapping[type, Callable[[Reader, str, dict[str, Any], dict[str, Any]], Any]] = {
    Settings: _build_settings,
    SidecarSettings: _build_sidecar,
    DrainSettings: _build_drain,
    S3Settings: _build_s3,
    RollbackSettings: _build_rollback,
    ReplicaSettings: _build_replicas,
    TracingSettings: _build_tracing,
    GoldenRequest: _build_golden,
    ExpectedOutput: _build_output,
    OutputTensor: _build_output_tensor,
    ModelSettings: _build_model,
    Expect: build_expect,
    TensorSpec: _build_tensor,
}
