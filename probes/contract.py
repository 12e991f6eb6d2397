"""Does a golden request fit a model version? Pure: a version's contract (the inputs and outputs it
declares, from Triton's metadata or from a model config) against the golden request of healer.yaml.

A golden request that does not fit the version it is sent to gets a refusal from Triton (HTTP 400),
which reads exactly like a model that fails. Checked first, the two are told apart (``judge_fit``):

* it fits the version served: probe it;
* it does not, and fits the stable version (the ledger's newest stable record): the new version
  changed its contract, a failure of that version (probed and healed as any other);
* it fits neither (or the version served is the stable one): a configuration error in healer.yaml.
  Nothing is learnt about the model; it is reported loudly and never acted on.

What is checked: every input the request sends is one the version declares, with its datatype and a
shape of the declared rank whose fixed dimensions match (-1 in a declared shape takes any size);
every input the version requires is sent; a batch within max_batch_size; every output the request
expects is one the version declares. An expected output's datatype and shape are not: what a model
returns is its answer, compared by the business tier (a wrong answer when it differs).

Each finding names the key of healer.yaml it is about (``models[0].golden.inputs[0].name: ...``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from healer.settings import GoldenRequest, TensorSpec
from probes.suite import Golden, as_suite

ANY_SIZE = -1  # a declared dimension that takes any size (Triton's -1)


@dataclass(frozen=True)
class TensorContract:
    name: str
    datatype: str  # KServe v2 datatype (FP32, BYTES, ...)
    shape: tuple[int, ...]  # with ANY_SIZE where any size fits; the batch dimension included
    optional: bool = False


@dataclass(frozen=True)
class ModelContract:
    """What one model version declares, and where that was read (for the findings)."""

    what: str  # "linear_scorer v2", "stable v1 (the ledger's record)"
    inputs: tuple[TensorContract, ...]
    outputs: tuple[TensorContract, ...]
    max_batch_size: int | None = None  # None: not known (metadata alone); 0: the model does not batch
    optional_known: bool = False  # whether the inputs' optional flags are known (a config was read)


class Fit(StrEnum):
    FITS = "fits"
    CONTRACT_CHANGE = "contract-change"  # fits the stable version, not this one: a failure of this one
    CONFIG_ERROR = "configuration-error"  # fits neither: healer.yaml is wrong, nothing learnt
    # Does not fit, and the stable version could not be read (the store did not answer): nothing
    # learnt, asked again next time (never remembered).
    UNDECIDED = "undecided"


@dataclass(frozen=True)
class FitVerdict:
    fit: Fit
    findings: tuple[str, ...] = ()  # what does not fit the version served, each naming its key
    why: str = ""  # one line: what was compared with what


# ---- contracts from what Triton says ----------------------------------------------------------------------


def contract_from_metadata(
    metadata: Mapping[str, Any], config: Mapping[str, Any] | None = None, *, what: str
) -> ModelContract:
    """A served version's contract from Triton's ``GET /v2/models/NAME/versions/V`` (its shapes carry
    -1 for the batch dimension), with the model config's max_batch_size and optional inputs when
    ``config`` (``GET /v2/models/NAME/config``) could be read."""
    optional = {str(i.get("name")) for i in _rows(config, "input") if i.get("optional")} if config else set()
    return ModelContract(
        what=what,
        inputs=tuple(
            TensorContract(
                str(i.get("name")), str(i.get("datatype")), _dims(i.get("shape")), str(i.get("name")) in optional
            )
            for i in _rows(metadata, "inputs")
        ),
        outputs=tuple(
            TensorContract(str(o.get("name")), str(o.get("datatype")), _dims(o.get("shape")))
            for o in _rows(metadata, "outputs")
        ),
        max_batch_size=_max_batch(config) if config else None,
        optional_known=config is not None,
    )


def contract_from_config(config: Mapping[str, Any], *, what: str) -> ModelContract | None:
    """A version's contract from a model config in Triton's JSON form (what the ledger records when a
    version is promoted: StableRecord.config); None when it declares no inputs (nothing recorded)."""
    inputs = _rows(config, "input")
    if not inputs:
        return None
    batch = _max_batch(config)
    prefix = (ANY_SIZE,) if batch > 0 else ()
    return ModelContract(
        what=what,
        inputs=tuple(
            TensorContract(
                str(i.get("name")),
                _config_datatype(i.get("data_type")),
                prefix + _dims(i.get("dims")),
                bool(i.get("optional")),
            )
            for i in inputs
        ),
        outputs=tuple(
            TensorContract(str(o.get("name")), _config_datatype(o.get("data_type")), prefix + _dims(o.get("dims")))
            for o in _rows(config, "output")
        ),
        max_batch_size=batch,
        optional_known=True,
    )


def _rows(document: Mapping[str, Any] | None, key: str) -> list[Mapping[str, Any]]:
    rows = (document or {}).get(key) or []
    return [row for row in rows if isinstance(row, Mapping)] if isinstance(rows, list) else []


def _dims(raw: Any) -> tuple[int, ...]:
    # Triton's JSON writes int64 dims as numbers; protobuf's JSON form may write them as strings.
    return tuple(int(d) for d in raw) if isinstance(raw, list) else ()


def _max_batch(config: Mapping[str, Any]) -> int:
    try:
        return int(config.get("max_batch_size") or 0)
    except (TypeError, ValueError):
        return 0


def _config_datatype(raw: Any) -> str:
    name = str(raw or "").removeprefix("TYPE_")
    return "BYTES" if name == "STRING" else name


# ---- the golden request against a contract ------------------------------------------------------------


def misfits(golden: GoldenRequest, contract: ModelContract, *, key: str) -> tuple[str, ...]:
    """What in ``golden`` does not fit ``contract``; () when it fits. ``key``: the golden request's key
    in healer.yaml (``models[0].golden``), which every finding starts with."""
    findings: list[str] = []
    declared = {t.name: t for t in contract.inputs}
    for i, tensor in enumerate(golden.inputs):
        where = f"{key}.inputs[{i}]"
        spec = declared.get(tensor.name)
        if spec is None:
            findings.append(
                f"{where}.name: {contract.what} has no input {tensor.name!r}; its inputs: {_names(contract.inputs)}"
            )
            continue
        findings.extend(_tensor_misfits(tensor, spec, where, contract))
    sent = {t.name for t in golden.inputs}
    if contract.optional_known:
        for spec in contract.inputs:
            if spec.name not in sent and not spec.optional:
                findings.append(
                    f"{key}.inputs: no {spec.name!r}, an input {contract.what} requires "
                    f"({spec.datatype} {_shape(spec.shape)})"
                )
    outputs = {t.name for t in contract.outputs}
    for i, expected in enumerate(golden.outputs):
        if expected.tensor.name not in outputs:
            findings.append(
                f"{key}.outputs[{i}].name: {contract.what} has no output {expected.tensor.name!r}; "
                f"its outputs: {_names(contract.outputs)}"
            )
    return tuple(findings)


def suite_misfits(golden: Golden, contract: ModelContract, *, key: str) -> tuple[str, ...]:
    """``misfits`` of every request of a golden suite; a request's findings start with its key
    (``models[0].golden[2]``; a suite of one: ``key`` itself)."""
    suite = as_suite(golden)
    if len(suite) == 1:
        return misfits(suite[0], contract, key=key)
    return tuple(f for i, request in enumerate(suite) for f in misfits(request, contract, key=f"{key}[{i}]"))


def _tensor_misfits(tensor: TensorSpec, spec: TensorContract, where: str, contract: ModelContract) -> list[str]:
    findings = []
    if tensor.datatype != spec.datatype:
        findings.append(f"{where}.datatype: {tensor.datatype}, but {contract.what}'s {spec.name} is {spec.datatype}")
    shape = tuple(tensor.shape)
    if len(shape) != len(spec.shape):
        findings.append(
            f"{where}.shape: {_shape(shape)} does not fit {contract.what}'s {spec.name} {_shape(spec.shape)} "
            f"(rank {len(shape)}, not {len(spec.shape)})"
        )
    else:
        wrong = [d for d, (got, want) in enumerate(zip(shape, spec.shape, strict=True)) if want not in (ANY_SIZE, got)]
        if wrong:
            d = wrong[0]
            findings.append(
                f"{where}.shape: {_shape(shape)} does not fit {contract.what}'s {spec.name} {_shape(spec.shape)} "
                f"(dimension {d} is {shape[d]}, not {spec.shape[d]})"
            )
        elif contract.max_batch_size and shape and shape[0] > contract.max_batch_size:
            findings.append(
                f"{where}.shape: a batch of {shape[0]}, over {contract.what}'s max_batch_size {contract.max_batch_size}"
            )
    return findings


def _names(tensors: Sequence[TensorContract]) -> str:
    return ", ".join(t.name for t in tensors) or "none"


def _shape(shape: Sequence[int]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


# ---- a misfit: a contract change, or a configuration error ----------------------------------------------


def judge_fit(  # noqa: PLR0911 (a decision table: one return per case)
    version: str,
    served: tuple[str, ...],
    *,
    stable_version: str | None,
    stable: tuple[str, ...] | None,
) -> FitVerdict:
    """The golden request against the version served (``served``: its misfits) and, when it does not
    fit, against the stable version (``stable``: its misfits; None when its contract is unknown: no
    stable version, or no record of its inputs). Only a request that fits the stable version makes a
    misfit the new version's failure; anything else is healer.yaml's, and nothing was learnt."""
    if not served:
        return FitVerdict(Fit.FITS)
    if stable_version is None:
        return FitVerdict(
            Fit.CONFIG_ERROR,
            served,
            f"the golden request does not fit v{version}, and no stable version is recorded to tell a changed "
            "contract from a wrong golden request",
        )
    if stable_version == version:
        if stable is not None and not stable:  # the served config changed since the version was verified
            return FitVerdict(
                Fit.CONTRACT_CHANGE,
                served,
                f"stable v{version}'s contract changed since it was promoted: the golden request fits v{version} "
                "as the ledger recorded it, not as Triton serves it now",
            )
        return FitVerdict(Fit.CONFIG_ERROR, served, f"the golden request does not fit v{version}, the stable version")
    if stable is None:
        return FitVerdict(
            Fit.CONFIG_ERROR,
            served,
            f"the golden request does not fit v{version}, and stable v{stable_version}'s inputs are not known "
            "(promoted before healer recorded its config, and not served)",
        )
    if stable:
        return FitVerdict(
            Fit.CONFIG_ERROR, served, f"the golden request fits neither v{version} nor stable v{stable_version}"
        )
    return FitVerdict(
        Fit.CONTRACT_CHANGE,
        served,
        f"v{version} changed the contract: the golden request fits stable v{stable_version}, not v{version}",
    )


def misfit_reason(model: str, version: str, verdict: FitVerdict) -> str:
    """One line for a golden request that does not fit: what it means, then every finding with its key."""
    findings = "; ".join(verdict.findings)
    if verdict.fit is Fit.CONFIG_ERROR:
        return f"configuration error, nothing learnt about {model} v{version}: {verdict.why}: {findings}"
    if verdict.fit is Fit.UNDECIDED:
        return f"not probed, nothing learnt about {model} v{version}: {verdict.why}: {findings}"
    return f"{verdict.why}: {findings}"
