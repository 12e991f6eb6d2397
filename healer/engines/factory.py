"""Build the configured rollback engine from settings (the edge where clients are constructed)."""

from __future__ import annotations

from healer.engines import RollbackEngine
from healer.settings import Settings


def local_engine(settings: Settings) -> RollbackEngine:
    from healer.engines.local import LocalEngine
    from workflows.context import context_from_settings
    from workflows.rollback import build_rollback_template

    return LocalEngine(build_rollback_template(), lambda: context_from_settings(settings), settings.rollback.state_dir)


def argo_engine(settings: Settings) -> RollbackEngine:
    from healer.engines.argo import ArgoEngine

    argo = settings.rollback.argo
    token = argo.token_file.read_text().strip() if argo.token_file is not None else None
    return ArgoEngine(
        argo.host,
        argo.namespace,
        token=token,
        verify_ssl=argo.verify_ssl,
        request_timeout_s=argo.request_timeout_s,
    )


def engine_from_settings(settings: Settings) -> RollbackEngine:
    return argo_engine(settings) if settings.rollback.engine == "argo" else local_engine(settings)
