"""Argo's own expr, run by Go: an expression of a WorkflowTemplate (a labelsFrom label's) evaluated by the
expr and sprig versions Argo v4.1.2 uses, over the workflow parameters given, each set in turn.

Argo v4.1.2 evaluates labelsFrom with expr-lang/expr v1.17.8 over sprig v3.3.0's GenericFuncMap less
env/expandenv (its go.mod and util/expr/env/env.go), after expanding "workflow.parameters.model"
into nested maps; workflow/controller/operator.go compiles with expr.Env(env) and runs it. Needs Go
and its module proxy (or a module cache): the test is skipped without them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

GO_MOD = """module healer.dev/labelcheck

go 1.22

require (
\tgithub.com/Masterminds/sprig/v3 v3.3.0
\tgithub.com/expr-lang/expr v1.17.8
)
"""
GO_MAIN = """package main

import (
\t"encoding/json"
\t"os"

\tsprig "github.com/Masterminds/sprig/v3"
\t"github.com/expr-lang/expr"
)

func main() {
\tvar request struct {
\t\tExpression string           `json:"expression"`
\t\tParameters []map[string]any `json:"parameters"`
\t}
\tif err := json.NewDecoder(os.Stdin).Decode(&request); err != nil {
\t\tpanic(err)
\t}
\tfuncs := sprig.GenericFuncMap()
\tdelete(funcs, "env")
\tdelete(funcs, "expandenv")
\tlabels := []any{}
\tfor _, parameters := range request.Parameters {
\t\tenv := map[string]any{"workflow": map[string]any{"parameters": parameters}, "sprig": funcs}
\t\tprogram, err := expr.Compile(request.Expression, expr.Env(env))
\t\tif err != nil {
\t\t\tpanic(err)
\t\t}
\t\tlabel, err := expr.Run(program, env)
\t\tif err != nil {
\t\t\tpanic(err)
\t\t}
\t\tlabels = append(labels, label)
\t}
\tif err := json.NewEncoder(os.Stdout).Encode(labels); err != nil {
\t\tpanic(err)
\t}
}
"""


def argo_expr(workdir: Path, expression: str, parameters: list[dict[str, str]]) -> list[Any]:
    """What ``expression`` gives for each set of workflow parameters (go mod tidy, then go run: 300 s
    each at most; mark the test subprocess, with a timeout of 660 s)."""
    go = shutil.which("go")
    if go is None:
        pytest.skip("no Go toolchain: the expression is not evaluated")
    (workdir / "go.mod").write_text(GO_MOD)
    (workdir / "main.go").write_text(GO_MAIN)
    env = {**os.environ, "GOFLAGS": "-mod=mod", "GOTOOLCHAIN": "local", "GOWORK": "off"}
    tidy = subprocess.run(
        [go, "mod", "tidy"], check=False, cwd=workdir, env=env, capture_output=True, text=True, timeout=300
    )
    if tidy.returncode != 0:
        pytest.skip(f"Go modules not available (go mod tidy): {tidy.stderr.strip()[-500:]}")
    run = subprocess.run(
        [go, "run", "."],
        cwd=workdir,
        env=env,
        input=json.dumps({"expression": expression, "parameters": parameters}),
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    result: list[Any] = json.loads(run.stdout)
    return result
