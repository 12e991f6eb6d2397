"""What both Triton clients speak (healer/edges/triton.py's TritonHttp, healer/edges/triton_rest.py's
TritonRest): the errors, the answers' types and the helpers both use. healer/edges/triton.py describes
them and is where the rest of healer imports them from."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from healer.settings import DATATYPES, TensorSpec

# Status codes that say "a proxy or the server could not handle this right now", not "the model is wrong".
UNAVAILABLE_STATUSES = frozenset({502, 503, 504})


class TritonError(Exception):
    """Base class for errors talking to Triton."""


class TritonUnavailable(TritonError):
    """Triton could not be reached or did not answer in time."""


class TritonTimeout(TritonUnavailable):
    """The request was sent and no answer came within the timeout (not refused, not reset)."""


class TritonTooLarge(TritonUnavailable):
    """Triton answered more than a call reads (a runaway output): read no further. Nothing learnt,
    unless the caller knows the model is served (a generate answer over its cap)."""


class TritonRejected(TritonError):
    """Triton answered with an error status."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        self.message = message
        super().__init__(f"HTTP {status}: {message}")


@dataclass(frozen=True, eq=False)
class OutputTensor:
    name: str
    datatype: str
    values: npt.NDArray[Any]


@dataclass(frozen=True)
class IndexEntry:
    """One row of Triton's repository index."""

    name: str
    version: str | None
    state: str | None
    reason: str

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> IndexEntry:
        """A row of Triton's JSON index, as both clients receive it."""
        return cls(
            name=str(row.get("name")),
            version=str(row["version"]) if row.get("version") is not None else None,
            state=row.get("state"),
            reason=str(row.get("reason", "")),
        )


def served_in(metadata: Mapping[str, Any]) -> list[str]:
    """The versions a model's metadata lists, oldest first."""
    return sorted((str(v) for v in metadata.get("versions", [])), key=int)


def error_message(message: str) -> str:
    try:
        body = json.loads(message)
    except ValueError:
        return message
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        return str(body["error"])
    return message


def wire_array(tensor: TensorSpec) -> npt.NDArray[Any]:
    if tensor.datatype == "BYTES":
        return np.asarray(tensor.values, dtype=np.object_)
    return np.ascontiguousarray(tensor.values, dtype=DATATYPES[tensor.datatype])
