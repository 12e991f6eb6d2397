"""The healer-rollback WorkflowTemplate, read as the LocalEngine executes it.

``read_template`` takes the Argo model Hera builds (the very object ``healer render`` writes for
Argo) and reads what the LocalEngine needs of it: the entrypoint and the exit handler, the
workflow's ``activeDeadlineSeconds``, its parameters' defaults, the mutex, and each runner script's
``-e module:function`` with its inputs, outputs, retry strategy and own deadline. Also the two
expressions a step may hold: ``{{...}}`` substitution and ``when`` with ``==``/``!=``.

Anything else is refused loudly (``UnsupportedTemplate``) instead of half-run. The pydantic v1/v2
differences (a root model's ``root`` or ``__root__``) are met here, in ``_root`` and
``parallel_steps``, and nowhere else.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from healer.engines import EngineRejected

PARAM = re.compile(r"\{\{\s*workflow\.parameters\.([A-Za-z0-9_.-]+)\s*\}\}")
# "asInt(lastRetry.exitCode) == N", or several joined by "||": the exit codes a retry is for.
_RETRY_CLAUSE = re.compile(r"^\s*asInt\(lastRetry\.exitCode\)\s*==\s*(\d+)\s*$")
_WHEN = re.compile(r"^\s*(.*?)\s*(==|!=)\s*(.*?)\s*$")
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h)$")


class UnsupportedTemplate(EngineRejected):
    """The template uses something the LocalEngine cannot execute faithfully."""


@dataclass(frozen=True)
class ScriptSpec:
    """A runner script template: the step function it calls and how."""

    name: str
    function: Callable[..., Any]
    inputs: tuple[tuple[str, str | None], ...]  # (name, default)
    outputs: tuple[tuple[str, str], ...]  # (name, file name in the output directory)
    retry_limit: int
    retry_exit_codes: frozenset[int]  # the exit codes its expression retries; empty: never retried
    backoff_s: float
    backoff_factor: float
    backoff_max_s: float
    deadline_s: float | None = None  # the template's own activeDeadlineSeconds, per attempt


@dataclass(frozen=True)
class TemplateSpec:
    """The workflow as a whole: where it starts, what runs on exit, its limits and its templates."""

    entrypoint: str
    on_exit: str | None
    deadline_s: float | None  # the workflow's activeDeadlineSeconds
    defaults: dict[str, str]  # the workflow parameters' values when a request leaves them out
    mutex_template: str | None  # the mutex's name, with {{workflow.parameters.X}} in it
    templates: dict[str, Any]  # every template by name, as Hera's model holds it
    scripts: dict[str, ScriptSpec]  # the script templates among them, read

    def mutex(self, parameters: dict[str, str]) -> str | None:
        """The mutex a run with these parameters takes; None if the template has none."""
        if not self.mutex_template:
            return None
        return PARAM.sub(lambda m: parameters.get(m.group(1), ""), self.mutex_template)


def read_template(model: Any) -> TemplateSpec:
    """Read Hera's built WorkflowTemplate model; ``UnsupportedTemplate`` for what cannot run here.
    Each script's step function is imported now (a missing one fails here, not mid-rollback)."""
    spec = model.spec
    mutexes = spec.synchronization.mutexes if spec.synchronization else None
    templates = {t.name: t for t in spec.templates}
    scripts = {t.name: _script_spec(t) for t in spec.templates if t.script is not None}
    for t in spec.templates:
        if t.script is None and t.steps is None and t.suspend is None:
            raise UnsupportedTemplate(f"template {t.name!r}: only steps, script and suspend templates are supported")
        if t.suspend is not None and t.suspend.duration:
            raise UnsupportedTemplate(f"suspend template {t.name!r}: a duration is not supported (resumed by hand)")
    return TemplateSpec(
        entrypoint=spec.entrypoint,
        on_exit=spec.on_exit,
        deadline_s=float(spec.active_deadline_seconds) if spec.active_deadline_seconds else None,
        defaults={p.name: (p.value or "") for p in (spec.arguments.parameters or [])},
        mutex_template=mutexes[0].name if mutexes else None,
        templates=templates,
        scripts=scripts,
    )


def _script_spec(template: Any) -> ScriptSpec:
    args = list(template.script.args or [])
    if "-e" not in args or args[:2] != ["-m", "hera.workflows.runner"]:
        raise UnsupportedTemplate(f"script {template.name!r} is not a Hera runner script: {args}")
    module_name, _, function_name = args[args.index("-e") + 1].partition(":")
    function = getattr(importlib.import_module(module_name), function_name)
    inputs = tuple((p.name, p.default) for p in (template.inputs.parameters or [])) if template.inputs else ()
    outputs = tuple(
        (p.name, Path(p.value_from.path).name)
        for p in ((template.outputs.parameters or []) if template.outputs else [])
        if p.value_from is not None and p.value_from.path
    )
    limit, exit_codes = 0, frozenset[int]()
    backoff_s, factor, backoff_max = 0.0, 1.0, 0.0
    retry = template.retry_strategy
    if retry is not None:
        limit = int(str(_root(retry.limit)))
        if retry.expression:
            clauses = [_RETRY_CLAUSE.match(part) for part in retry.expression.split("||")]
            if not all(clauses):
                raise UnsupportedTemplate(f"retry expression {retry.expression!r} not understood")
            exit_codes = frozenset(int(c.group(1)) for c in clauses if c)
        if retry.backoff is not None:
            backoff_s = duration_s(retry.backoff.duration)
            factor = float(str(_root(retry.backoff.factor or 1)))
            backoff_max = duration_s(retry.backoff.max_duration) or backoff_s
    return ScriptSpec(
        name=template.name,
        function=function,
        inputs=inputs,
        outputs=outputs,
        retry_limit=limit,
        retry_exit_codes=exit_codes,
        backoff_s=backoff_s,
        backoff_factor=factor,
        backoff_max_s=backoff_max,
        deadline_s=_int_or_string_s(template.active_deadline_seconds),
    )


def parallel_steps(group: Any) -> Sequence[Any]:
    """The steps of one group of a steps template (Hera's ParallelSteps: pydantic v2 ``root``, v1 ``__root__``)."""
    return group.root if hasattr(group, "root") else group.__root__  # type: ignore[no-any-return]


def _root(value: Any) -> Any:
    """An IntOrString's value (pydantic v2's root model), or the plain value itself."""
    return value.root if hasattr(value, "root") else value


def _int_or_string_s(value: Any) -> float | None:
    """A template's activeDeadlineSeconds (Hera's IntOrString, or a plain int) in seconds; None if unset."""
    if value is None:
        return None
    return float(str(_root(value)))


def duration_s(text: str | None) -> float:
    """An Argo duration ("500ms", "2s", "1.5m", "1h") in seconds; 0 if unset."""
    if not text:
        return 0.0
    match = _DURATION.match(str(text))
    if not match:
        raise UnsupportedTemplate(f"duration {text!r} not understood")
    value, unit = float(match.group(1)), match.group(2)
    return value * {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}[unit]


def substitute(text: str, parameters: dict[str, str]) -> str:
    """``{{workflow.status}}``, ``{{workflow.failures}}`` and ``{{workflow.parameters.X}}`` filled in;
    any other expression is refused. The exit handler's status and failures come as ``__status`` and
    ``__failures`` among the parameters."""
    text = text.replace("{{workflow.status}}", parameters.get("__status", "Running"))
    text = text.replace("{{workflow.failures}}", parameters.get("__failures", "[]"))
    text = PARAM.sub(lambda m: parameters.get(m.group(1), ""), text)
    if "{{" in text:
        raise UnsupportedTemplate(f"unresolved expression in {text!r}")
    return text


def evaluate_when(expression: str) -> bool:
    """A step's ``when``, already substituted: ``left == right`` or ``left != right``, compared as text."""
    match = _WHEN.match(expression)
    if not match:
        raise UnsupportedTemplate(f"when expression {expression!r} not understood")
    left, operator, right = match.groups()
    return (left == right) if operator == "==" else (left != right)
