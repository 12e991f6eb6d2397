"""The README's commands, run as a newcomer types them: its code blocks read by section, and a shell
session that runs one command after another (so `source` and `export` carry over, as in a terminal)
and times each, line by line.

Used by `python -m tools.readme_figures --record` (the quickstart on a fresh clone: the recorded run
behind the README's sample output and docs/measured.md's newcomer timeline) and by the e2e tier's
walk-through (tests/e2e/test_readme_walkthrough.py: the quickstart and the Commands section). A
development tool, not shipped.
"""

from __future__ import annotations

import contextlib
import os
import platform
import queue
import re
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
QUICKSTART = "## Quickstart"
COMMANDS = "### Commands"
_FENCE = re.compile(r"^(?P<indent>\s*)```(?P<lang>\S*)\s*$")
_DONE = "__healer_walkthrough_step__"


@dataclass(frozen=True)
class Block:
    lang: str  # "sh" for commands; "" for sample output
    lines: tuple[str, ...]


def section(text: str, heading: str) -> str:
    """The text under ``heading`` up to the next heading of the same or a higher level."""
    level = len(heading) - len(heading.lstrip("#"))
    lines = text.splitlines()
    try:
        start = lines.index(heading)
    except ValueError:
        raise ValueError(f"README.md: no section {heading!r}") from None
    end, fenced = len(lines), False
    for i in range(start + 1, len(lines)):
        fenced = fenced != bool(_FENCE.match(lines[i]))  # a shell comment in a code block is no heading
        if not fenced and re.match(rf"^#{{1,{level}}} ", lines[i]):
            end = i
            break
    return "\n".join(lines[start + 1 : end])


def code_blocks(text: str) -> list[Block]:
    blocks: list[Block] = []
    current: list[str] | None = None
    lang = ""
    for line in text.splitlines():
        fence = _FENCE.match(line)
        if fence and current is None:
            current, lang = [], fence["lang"]
        elif fence and current is not None:
            blocks.append(Block(lang, tuple(current)))
            current = None
        elif current is not None:
            current.append(line.strip())
    return blocks


def commands(text: str, heading: str) -> list[str]:
    """Each command of the section's ``sh`` blocks, in order: one per line, a trailing backslash
    joining lines as the shell does; blank lines and whole-line comments left out."""
    found: list[str] = []
    for block in code_blocks(section(text, heading)):
        if block.lang != "sh":
            continue
        pending = ""
        for line in block.lines:
            if not line or line.startswith("#"):
                continue
            if line.endswith("\\"):
                pending += line[:-1].rstrip() + " "
                continue
            found.append(pending + line)
            pending = ""
    return found


def without_comment(command: str) -> str:
    """The command without its trailing ``# comment`` (a '#' after a space, outside quotes)."""
    quote = ""
    for i, char in enumerate(command):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and i > 0 and command[i - 1] == " ":
            return command[:i].rstrip()
    return command.rstrip()


@dataclass
class Step:
    command: str  # as the README writes it
    ran: str  # what the session ran (the same, or with a placeholder filled in)
    seconds: float = 0.0
    exit: int | None = None  # None: did not finish within its time
    lines: list[tuple[float, str]] = field(default_factory=list)  # (seconds since the step started, text)

    def to_dict(self) -> dict[str, Any]:
        return {
            "command": self.command,
            "ran": self.ran,
            "seconds": round(self.seconds, 1),
            "exit": self.exit,
            "lines": [[round(at, 1), text] for at, text in self.lines],
        }

    @property
    def text(self) -> str:
        return "\n".join(text for _, text in self.lines)


class ShellSession:
    """One bash, fed one command at a time, its stdout and stderr merged as a terminal shows them.

    Each command runs in the session's shell (``{ command ; } </dev/null``), so ``source`` and ``export``
    last, and reads nothing from the session's own input. A command that does not finish within its
    time ends the session (its whole process group is killed): the step says so (exit None).
    """

    def __init__(self, cwd: Path, env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            ["bash", "--noprofile", "--norc"],
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
            start_new_session=True,
        )
        self._lines: queue.Queue[tuple[float, str | None]] = queue.Queue()
        assert self.process.stdout is not None
        threading.Thread(target=self._read, args=(self.process.stdout,), daemon=True).start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self._lines.put((time.monotonic(), line.rstrip("\n")))
        self._lines.put((time.monotonic(), None))

    def run(self, command: str, *, ran: str | None = None, timeout_s: float = 600) -> Step:
        step = Step(command, ran or command)
        assert self.process.stdin is not None
        started = time.monotonic()
        self.process.stdin.write(f"{{ {step.ran}\n}} </dev/null 2>&1\nprintf '\\n{_DONE} %s\\n' $?\n")
        self.process.stdin.flush()
        deadline = started + timeout_s
        while True:
            try:
                at, line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                step.seconds = time.monotonic() - started
                self.close()
                return step
            if line is None:  # the shell itself ended (exit in a command)
                step.seconds = at - started
                return step
            if line.startswith(_DONE):
                step.exit = int(line.split()[1])
                step.seconds = at - started
                if step.lines and step.lines[-1][1] == "":
                    step.lines.pop()  # the newline printed before the marker
                return step
            step.lines.append((at - started, line))

    def close(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)

    def __enter__(self) -> ShellSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def fresh_clone(target: Path, source: Path = ROOT) -> Step:
    """``git clone`` of the repository's HEAD (what is committed: a newcomer's checkout), timed."""
    started = time.monotonic()
    result = subprocess.run(
        ["git", "clone", "--quiet", str(source), str(target)], capture_output=True, text=True, timeout=300, check=False
    )
    step = Step(f"git clone {source} {target.name}", f"git clone --quiet {source} {target}")
    step.seconds, step.exit = time.monotonic() - started, result.returncode
    step.lines = [(step.seconds, line) for line in (result.stdout + result.stderr).splitlines()]
    return step


def newcomer_env(home: Path) -> dict[str, str]:
    """A login-like environment: no virtualenv active, healer not on PATH (as on a fresh machine)."""
    path = ":".join(
        p for p in os.environ.get("PATH", "/usr/bin:/bin").split(":") if "/.venv" not in p and "virtualenv" not in p
    )
    keep = ("LANG", "LC_ALL", "TERM", "TMPDIR", "http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY")
    env = {key: os.environ[key] for key in keep if key in os.environ}
    env.update({"PATH": path, "HOME": str(home), "PIP_CACHE_DIR": pip_cache_dir()})
    # pip's settings (an index, a wheel folder, a CA) are the machine's, as a newcomer's would be
    env.update(
        {k: v for k, v in os.environ.items() if k.startswith("PIP_") or k in ("REQUESTS_CA_BUNDLE", "SSL_CERT_FILE")}
    )
    return env


def pip_cache_dir() -> str:
    return os.environ.get("PIP_CACHE_DIR") or str(Path.home() / ".cache" / "pip")


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    model = ""
    with contextlib.suppress(OSError):
        model = next(
            (
                line.split(":", 1)[1].strip()
                for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")
            ),
            "",
        )
    return {
        "cpus": os.cpu_count(),
        "cpu": model or platform.processor(),
        "system": f"{platform.system()} {platform.release()}",
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "pip_cache": "warm" if Path(pip_cache_dir()).is_dir() and any(Path(pip_cache_dir()).iterdir()) else "empty",
        "pip_find_links": os.environ.get("PIP_FIND_LINKS", ""),
    }
