"""The golden request's tensors: their values read from a .npy or .json file or inline, and converted
to their datatype without silent loss."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import numpy.typing as npt

from healer.settings.reader import Reader
from healer.settings.schema import ConfigError
from healer.vocabulary import DATATYPES


def load_tensor_file(reader: Reader, raw: Any, key: str) -> Any:
    path = reader.path(raw, key)
    try:
        if path.suffix == ".npy":
            return np.load(path, allow_pickle=False)
        if path.suffix == ".json":
            return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, EOFError) as exc:
        raise ConfigError(reader.source, key, f"cannot read {str(path)!r}: {exc}") from exc
    raise ConfigError(reader.source, key, f"must end in .npy or .json, got {str(path)!r}")


def to_array(reader: Reader, values: Any, datatype: str, shape: tuple[int, ...], key: str) -> npt.NDArray[Any]:
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
