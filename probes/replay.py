"""A model's replay set: inputs kept in the store beside the model, with no expected outputs, sent to a new
version and to the stable version so that their answers can be compared (healer/core/agreement.py,
docs/agreement.md).

Layout, in the store, read as golden requests kept in the store are (probes/store_suite.py):

* ``<model>/replay/<NAME>.yaml`` (``.yml``, ``.json``): one input, as a golden request's inputs are
  written (``inputs: [{name, datatype, shape, data}]``, values inline; optional ``parameters``), for
  every version;
* ``<model>/replay/<NAME>.npy``: many inputs of a model with one input tensor: each row along the first
  axis is one input (sent with a batch dimension of 1 when the model's input has one); the tensor's
  name and datatype are the model's (the array's dtype must be that datatype's);
* ``<model>/<version>/replay/...``: the same, for that version alone (files of the version: hashed when
  it is promoted, staged and copied with it). A release reads the new version's.

Bounded: at most ``MAX_INPUTS`` inputs and ``MAX_BYTES`` bytes of files; a set over either, or a file
that does not load, is refused with an error naming the file (the gate then learns nothing: it never
judges part of a set). The answers too: each input is judged as soon as both versions have answered it,
and only its judgement kept (healer/core/agreement.py's ``Judged``: a few flags and figures, no tensor);
one input's answers over ``MAX_ANSWER_BYTES`` (both versions together) stop the gate, nothing learnt,
the cap named, before a bake's memory limit kills it.
"""

from __future__ import annotations

import io
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import yaml

from healer.core.agreement import Answer, Judged, summarise
from healer.settings import DATATYPES, VERSION_PATTERN, ConfigError, TensorSpec, parse_section
from healer.settings.yaml12 import load_yaml

YAML_SUFFIXES = (".yaml", ".yml", ".json")
ARRAY_SUFFIX = ".npy"
MAX_INPUTS = 1000
MAX_BYTES = 64 << 20  # every file of the set together
# One input's answers, both versions together, held while it is judged: a bake's pod has 512 MiB, and its
# client holds an answer's body beside its tensors while it reads it. Judged, they are dropped.
MAX_ANSWER_BYTES = 64 << 20


class ReplayError(ValueError):
    """The replay set cannot be used; the message names the file (or the prefix) and what is wrong."""


def replay_prefix(model: str, version: str | None = None) -> str:
    """Where the store keeps ``model``'s replay inputs: every version's, or ``version``'s own."""
    return f"{model}/replay/" if version is None else f"{model}/{version}/replay/"


@dataclass(frozen=True)
class ReplayFile:
    """One file of the set as read: YAML inputs (``tensors``) or an array of inputs (``array``)."""

    where: str  # store location / key: what an error names
    name: str  # the key without the model's prefix: what a verdict names
    tensors: tuple[TensorSpec, ...] = ()
    parameters: Mapping[str, Any] | None = None
    array: npt.NDArray[Any] | None = None

    @property
    def count(self) -> int:
        return int(self.array.shape[0]) if self.array is not None else 1


@dataclass(frozen=True)
class ReplayInput:
    name: str  # "replay/a.yaml", "replay/batch.npy[17]"
    inputs: tuple[TensorSpec, ...]
    parameters: Mapping[str, Any] | None = None


def read_replay_set(store: Any, model: str, version: str | None = None) -> tuple[ReplayFile, ...]:
    """Every replay file of ``model`` (and ``version``'s own), in key order, each checked; raises
    ReplayError naming the file, or the store's own errors (unreachable: nothing concluded)."""
    prefixes = [replay_prefix(model)]
    if version is not None and VERSION_PATTERN.match(version):  # a name from Triton, never a path
        prefixes.append(replay_prefix(model, version))
    files: list[ReplayFile] = []
    total_bytes = total_inputs = 0
    for prefix in prefixes:
        for key in sorted(k for k in store.blobs.keys(prefix) if k.endswith((*YAML_SUFFIXES, ARRAY_SUFFIX))):
            where = f"{store.location}/{key}"
            raw = _read_capped(store, key, where, MAX_BYTES - total_bytes)
            total_bytes += len(raw)
            read = _parse(where, key[len(model) + 1 :], raw)
            total_inputs += read.count
            if total_inputs > MAX_INPUTS:
                raise ReplayError(
                    f"{where}: the replay set has over {MAX_INPUTS} inputs with this file: keep it smaller"
                )
            files.append(read)
    return tuple(files)


def _read_capped(store: Any, key: str, where: str, left: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    for chunk in store.blobs.open_stream(key):
        size += len(chunk)
        if size > left:
            raise ReplayError(f"{where}: the replay set is over {MAX_BYTES >> 20} MiB with this file: keep it smaller")
        chunks.append(chunk)
    return b"".join(chunks)


def _parse(where: str, name: str, raw: bytes) -> ReplayFile:
    if name.endswith(ARRAY_SUFFIX):
        try:
            array = np.load(io.BytesIO(raw), allow_pickle=False)
        except (ValueError, OSError, EOFError) as exc:
            raise ReplayError(f"{where}: not a .npy array without objects: {exc}") from None
        if array.ndim < 1 or array.shape[0] == 0:
            raise ReplayError(f"{where}: an array of inputs needs at least one row along its first axis")
        return ReplayFile(where, name, array=array)
    try:
        document = load_yaml(raw.decode("utf-8"), where)
    except (UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ReplayError(f"{where}: not valid YAML: {exc}") from None
    except ConfigError as exc:
        raise ReplayError(str(exc)) from None
    if not isinstance(document, dict) or not isinstance(document.get("inputs"), list) or not document["inputs"]:
        raise ReplayError(f"{where}: inputs: a replay file is a mapping with a list of input tensors under inputs")
    unknown = sorted(set(document) - {"inputs", "parameters"})
    if unknown:
        raise ReplayError(f"{where}: {unknown[0]}: unknown key (allowed here: inputs, parameters)")
    tensors = []
    for i, tensor in enumerate(document["inputs"]):
        if isinstance(tensor, dict) and "file" in tensor:
            raise ReplayError(f"{where}: inputs[{i}].file: not read from a store: write the values as data")
        try:
            tensors.append(parse_section(TensorSpec, tensor, source=where, base_dir=Path("/nonexistent")))
        except ConfigError as exc:
            at = f"inputs[{i}].{exc.key_path}" if exc.key_path else f"inputs[{i}]"
            raise ReplayError(f"{where}: {at}: {exc.problem}") from None
    parameters = document.get("parameters")
    if parameters is not None and not isinstance(parameters, dict):
        raise ReplayError(f"{where}: parameters: must be a mapping")
    return ReplayFile(where, name, tensors=tuple(tensors), parameters=parameters)


def replay_inputs(files: Sequence[ReplayFile], metadata: Mapping[str, Any]) -> list[ReplayInput]:
    """The set as requests for a version whose metadata (Triton's) is ``metadata``: an array's rows named by
    their index, shaped as the model's one input takes them; ReplayError naming the file when they do not fit."""
    found: list[ReplayInput] = []
    declared = list(metadata.get("inputs") or [])
    for read in files:
        if read.array is None:
            found.append(ReplayInput(read.name, read.tensors, read.parameters))
            continue
        if len(declared) != 1:
            raise ReplayError(
                f"{read.where}: an array of inputs is for a model with one input; this one has {len(declared)}: "
                "write each input as a YAML file naming its tensors"
            )
        name, datatype = str(declared[0]["name"]), str(declared[0]["datatype"])
        want = DATATYPES.get(datatype)
        if want is None or datatype == "BYTES" or np.dtype(want) != read.array.dtype:
            raise ReplayError(
                f"{read.where}: the array is {read.array.dtype}; the model's input {name} is {datatype}"
                + (f" ({np.dtype(want)})" if want is not None and datatype != "BYTES" else "")
            )
        dims = len(declared[0].get("shape") or [])
        row_dims = read.array.ndim - 1
        if dims not in (row_dims, row_dims + 1):
            raise ReplayError(
                f"{read.where}: each row is {list(read.array.shape[1:])}; the model's input {name} has "
                f"{dims} dimension(s) ({declared[0].get('shape')})"
            )
        for i, row in enumerate(read.array):
            values = row.reshape((1, *row.shape)) if dims == row_dims + 1 else row
            tensor = TensorSpec(name=name, datatype=datatype, shape=tuple(values.shape), values=values)
            found.append(ReplayInput(f"{read.name}[{i}]", (tensor,)))
    return found


class ReplayUnanswered(Exception):
    """A version gave no usable answer to a replay input (an error, a timeout, not served): nothing learnt."""


def held_bytes(values: npt.NDArray[Any]) -> int:
    """What an output tensor holds: its buffer, and for BYTES (objects) each element's own bytes too."""
    size = int(values.nbytes)
    if values.dtype.kind == "O":
        size += sum(len(v) if isinstance(v, bytes | str) else 8 for v in values.reshape(-1))
    return size


def answer_both(
    triton: Any,
    model: str,
    *,
    stable: str,
    candidate: str,
    inputs: Sequence[ReplayInput],
    outputs: Sequence[str],
    timeout_s: float,
    deadline_s: float,
    cancelled: Callable[[], None] = lambda: None,
    clock: Callable[[], float] = time.monotonic,
    max_answer_bytes: int | None = None,
) -> list[Judged]:
    """Every input sent to both versions (the version named in the infer URL), in turn, and judged as it is
    answered (``summarise``: its answers dropped, its judgement kept); the outputs asked for: ``outputs``, else
    each version's own (its metadata). Raises ReplayUnanswered at the first input a version does not answer,
    whose answers hold over ``max_answer_bytes`` (None: ``MAX_ANSWER_BYTES``), or past ``deadline_s`` (never
    a verdict on part of the set). ``cancelled`` raises to stop."""
    from healer.edges.triton import TritonError

    asked: dict[str, list[str]] = {}
    for version in (stable, candidate):
        try:
            asked[version] = list(outputs) or [str(o["name"]) for o in triton.model_metadata(model, version)["outputs"]]
        except (TritonError, KeyError, TypeError) as exc:
            raise ReplayUnanswered(f"{model} v{version} metadata on {triton.url}: {exc}") from exc
    cap = MAX_ANSWER_BYTES if max_answer_bytes is None else max_answer_bytes
    started = clock()
    judged: list[Judged] = []
    for item in inputs:
        cancelled()
        if clock() - started > deadline_s:
            raise ReplayUnanswered(
                f"the replay set was not answered within {deadline_s:g} s ({len(judged)} of {len(inputs)} inputs)"
            )
        got: dict[str, dict[str, npt.NDArray[Any]]] = {}
        held = 0
        for side, version in (("stable", stable), ("candidate", candidate)):
            try:
                got[side] = _ask(triton, model, version, item, asked[version], timeout_s)
            except TritonError as exc:
                raise ReplayUnanswered(f"{item.name}: {model} v{version} on {triton.url}: {exc}") from exc
            held += sum(held_bytes(values) for values in got[side].values())
            if held > cap:
                whose = f"v{stable}" if side == "stable" else f"v{stable} and v{candidate}"
                raise ReplayUnanswered(
                    f"{item.name}: the answers of {model} {whose} hold {_size(held)}, over the gate's cap of "
                    f"{_size(cap)} per input (held at once, within a bake's memory limit): judge fewer or smaller "
                    "outputs (agreement.outputs)"
                )
        judged.append(summarise(Answer(item.name, got["stable"], got["candidate"]), tuple(outputs)))
        del got  # this input's tensors: judged, dropped before the next is asked
    return judged


def _size(count: int) -> str:
    return f"{count / (1 << 20):.1f} MiB" if count >= 1 << 20 else f"{count:,} bytes"


def _ask(
    triton: Any, model: str, version: str, item: ReplayInput, outputs: list[str], timeout_s: float
) -> dict[str, npt.NDArray[Any]]:
    """One version's answer to one input, its tensors only (the client's result, and its body, let go)."""
    result = triton.infer(model, version, item.inputs, outputs, timeout_s, parameters=item.parameters or None)
    return {name: tensor.values for name, tensor in result.items()}
