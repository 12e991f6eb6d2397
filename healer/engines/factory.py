"""Build the configured rollback engine from settings (the edge where clients are constructed)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from healer.core.decisions import same_occurrence_window_s
from healer.engines import RollbackEngine
from healer.settings import Settings

if TYPE_CHECKING:
    from healer.engines.argo import ArgoEngine
    from healer.engines.local import LocalEngine


def local_engine(settings: Settings, *, state_dir: Path | None = None) -> LocalEngine:
    """The LocalEngine over the same template Argo runs, with this config's deadline.

    ``state_dir``: where its run records go (default ``rollback.state_dir``). Every rollback heals what
    ``rollback.replicas`` lists: its selector's pods, or its addresses (the drills' replica sets)."""
    from healer.engines.local import LocalEngine
    from workflows.rollback import TemplateOptions, build_rollback_template

    options = TemplateOptions(deadline_s=max(1, round(settings.rollback.deadline_s)))
    runs = state_dir if state_dir is not None else settings.rollback.state_dir
    return LocalEngine(
        build_rollback_template(options),
        _step_context(settings, runs),
        runs,
        join_window_s=same_occurrence_window_s(settings.rollback.deadline_s),
    )


def local_release_engine(settings: Settings, *, state_dir: Path | None = None) -> LocalEngine:
    """The LocalEngine over the healer-release template (the one Argo runs), as ``local_engine``."""
    from healer.engines.local import LocalEngine
    from workflows.release import build_release_template
    from workflows.rollback import TemplateOptions

    runs = state_dir if state_dir is not None else settings.rollback.state_dir
    return LocalEngine(build_release_template(TemplateOptions()), _step_context(settings, runs), runs)


def _step_context(settings: Settings, state_dir: Path) -> Callable[[], Any]:
    """A fresh step context per attempt. A lease held by a run of ``state_dir`` that died with its
    engine is taken over at once by the run finishing its work."""
    from healer.engines.records import died_with_engine
    from workflows.steps.context import context_from_settings

    def context() -> Any:
        return dataclasses.replace(
            context_from_settings(settings), run_is_dead=lambda run: died_with_engine(state_dir, run)
        )

    return context


def bearer_token(text: str) -> str:
    """A token file's contents as the token: `argo auth token` prints "Bearer <token>", a
    service-account token file holds the token alone; either works (never "Bearer Bearer ...")."""
    token = text.strip()
    scheme, _, rest = token.partition(" ")
    return rest.strip() if scheme.lower() == "bearer" and rest.strip() else token


def argo_engine(settings: Settings, *, request_timeout_s: float | None = None) -> ArgoEngine:
    """``request_timeout_s``: a shorter bound per call (the sidecar's, before it falls back)."""
    from healer.engines.argo import ArgoEngine

    argo = settings.rollback.argo
    token_file = argo.token_file
    return ArgoEngine(
        argo.host,
        argo.namespace,
        # Read per request: a projected service-account token is rotated under the running sidecar.
        token_provider=(lambda: bearer_token(token_file.read_text())) if token_file is not None else None,
        verify_ssl=str(argo.ca_file) if argo.verify_ssl and argo.ca_file is not None else argo.verify_ssl,
        request_timeout_s=request_timeout_s or argo.request_timeout_s,
        # A 409 joins a run only if it is this occurrence's: created within this window (healer/core/decisions.py).
        join_window_s=same_occurrence_window_s(settings.rollback.deadline_s),
    )


def engine_from_settings(settings: Settings) -> RollbackEngine:
    return argo_engine(settings) if settings.rollback.engine == "argo" else local_engine(settings)
