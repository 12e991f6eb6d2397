"""healer's configuration: one YAML file, read once at the edge into frozen, typed settings.

Each key is declared once, on the dataclass field that holds it (``Setting``: its documentation and
bounds; the field: its name, type and default). The loader reads every section by those declarations;
the configuration reference (docs/configuration-reference.md) and the Helm chart's values.schema.json
are generated from them (``python -m tools.settings_reference``).

Every error names the file, the key path and what is wrong, e.g.
``examples/bad.yaml: models[1].golden.outputs[0].atol: must be >= 0, got -1``.
Unknown keys are rejected so a typo never silently falls back to a default; a deprecated key is
accepted with a warning and ignored.

The modules: schema (the declaration), sections (the dataclasses), loader (reading a file by them),
reader (typed reads at a key path), addresses, tensors (the golden request's values), yaml12 (the
YAML itself). This package's names are the ones the rest of healer imports.
"""

from __future__ import annotations

from healer.settings.addresses import URL_SCHEMES, parse_address, redact_url
from healer.settings.loader import check_listen, load_settings, parse_section, parse_settings
from healer.settings.schema import FORMS, SETTING, ConfigError, DeclaredKey, Setting, declared_keys, is_section, setting
from healer.settings.sections import (
    MAX_DEADLINE_S,
    REPOSITORY_MODES,
    REPOSITORY_OBJECT_STORE,
    REPOSITORY_PER_POD,
    REPOSITORY_SHARED,
    RESERVED_SET_NAMES,
    ROLLBACK_ENGINES,
    ROLLBACK_ORDERS,
    AlertSettings,
    ArgoSettings,
    DrainPeers,
    DrainSettings,
    EmbeddedSettings,
    ExpectedOutput,
    GoldenRequest,
    ModelSettings,
    ReleaseSettings,
    ReplicaSettings,
    RollbackSettings,
    S3Settings,
    Settings,
    SidecarSettings,
    StoreSettings,
    TensorSpec,
    TierThresholds,
    TracingSettings,
    TrafficLimits,
    TrafficSettings,
    TritonSettings,
    hash_inputs,
)
from healer.settings.yaml12 import MAX_YAML_DEPTH
from healer.vocabulary import (
    DATATYPES,
    MAX_BAKE_S,
    MODEL_NAME_PATTERN,
    RELEASE_DEADLINE_S,
    UNKNOWN_VERSION,
    VERSION_PATTERN,
)

__all__ = [
    "DATATYPES",
    "FORMS",
    "MAX_BAKE_S",
    "MAX_DEADLINE_S",
    "MAX_YAML_DEPTH",
    "MODEL_NAME_PATTERN",
    "RELEASE_DEADLINE_S",
    "REPOSITORY_MODES",
    "REPOSITORY_OBJECT_STORE",
    "REPOSITORY_PER_POD",
    "REPOSITORY_SHARED",
    "RESERVED_SET_NAMES",
    "ROLLBACK_ENGINES",
    "ROLLBACK_ORDERS",
    "SETTING",
    "UNKNOWN_VERSION",
    "URL_SCHEMES",
    "VERSION_PATTERN",
    "AlertSettings",
    "ArgoSettings",
    "ConfigError",
    "DeclaredKey",
    "DrainPeers",
    "DrainSettings",
    "EmbeddedSettings",
    "ExpectedOutput",
    "GoldenRequest",
    "ModelSettings",
    "ReleaseSettings",
    "ReplicaSettings",
    "RollbackSettings",
    "S3Settings",
    "Setting",
    "Settings",
    "SidecarSettings",
    "StoreSettings",
    "TensorSpec",
    "TierThresholds",
    "TracingSettings",
    "TrafficLimits",
    "TrafficSettings",
    "TritonSettings",
    "check_listen",
    "declared_keys",
    "hash_inputs",
    "is_section",
    "load_settings",
    "parse_address",
    "parse_section",
    "parse_settings",
    "redact_url",
    "setting",
]
