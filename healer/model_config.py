"""A model config in Triton's JSON form (what the ledger records) written as ``config.pbtxt``.

Triton reads a model's configuration from ``<repository>/<model>/config.pbtxt``, protobuf text
format, whenever it loads the model without a config override: after a restart, on a new replica,
or when a person loads it by hand. A rollback pins the stable version through the load API's
override, so the file on disk is not what heals; it is what *stays* healed. The ledger keeps the
config the version was promoted with in Triton's JSON form (one fact); this module renders it with
Triton's own schema, the ``ModelConfig`` message shipped in tritonclient, so that every field
(int64 as JSON strings, enums, maps) comes out as Triton will parse it.

The schema module is loaded from its file rather than as ``tritonclient.grpc.model_config_pb2``:
importing the ``tritonclient.grpc`` package imports grpcio (several MB of memory in the sidecar,
which runs this on its in-pod fallback) and fails where grpcio is not installed.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any


class ConfigRenderError(Exception):
    """The JSON config cannot be written as config.pbtxt (schema unavailable, unknown field)."""


@cache
def _model_config_message() -> Any:
    spec = importlib.util.find_spec("tritonclient")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigRenderError("tritonclient is not installed: its model_config schema is needed")
    path = Path(next(iter(spec.submodule_search_locations))) / "grpc" / "model_config_pb2.py"
    module_spec = importlib.util.spec_from_file_location("healer_triton_model_config_pb2", path)
    if module_spec is None or module_spec.loader is None or not path.is_file():
        raise ConfigRenderError(f"{path}: Triton's model_config schema is missing from tritonclient")
    module = importlib.util.module_from_spec(module_spec)
    try:
        module_spec.loader.exec_module(module)
    except Exception as exc:  # protobuf missing or a runtime older than the schema was generated for
        raise ConfigRenderError(f"{path}: cannot load Triton's model_config schema: {exc}") from exc
    return module.ModelConfig


def render_config_pbtxt(config: Mapping[str, Any], *, model: str, current: str | None = None) -> str:
    """``config`` (Triton's JSON form) as config.pbtxt text, named ``model``. Strict: a field the
    schema does not know is an error, never dropped (a config missing a field may load and serve
    differently).

    The version policy is not the recorded one: that is whatever served the version when it was
    promoted (often a rollback's or an operator's pin), and a pin on disk would keep every later
    push from being served after a restart. It is ``current``'s (the file being replaced) when that
    parses, else Triton's default (the newest version; the failing one is moved aside)."""
    from google.protobuf import json_format, text_format

    message_type = _model_config_message()
    document = json.loads(json.dumps(dict(config)))
    document["name"] = model
    document.pop("version_policy", None)
    try:
        message = json_format.ParseDict(document, message_type())
    except json_format.ParseError as exc:
        raise ConfigRenderError(f"{model}: the recorded config does not fit Triton's schema: {exc}") from exc
    if current is not None:
        try:
            existing = text_format.Parse(current, message_type())
        except text_format.ParseError:
            existing = None
        if existing is not None and existing.HasField("version_policy"):
            message.version_policy.CopyFrom(existing.version_policy)
    header = (
        f"# Written by healer from the stable ledger's config of {model} (Triton's expanded form).\n"
        "# The file it replaced is kept in .healer-displaced/ beside the versions.\n"
    )
    return header + str(text_format.MessageToString(message))
