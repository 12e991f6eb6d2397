"""Writing files and directories with healer's modes (0644, 0755) whatever the umask."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

from healer.edges.store.layout import DIR_MODE, FILE_MODE


def write_atomic(path: Path, data: bytes) -> None:
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), FILE_MODE)  # mkstemp makes 0600; the rename keeps the mode
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)


def remove_path(path: Path) -> None:
    """Remove a file, a link (never what it points to) or a whole directory tree; OSError when it cannot."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


def make_dirs(path: Path) -> None:
    """``mkdir -p`` that gives every directory it creates mode 0755 whatever the umask; existing
    directories are left as they are (their modes are the operator's)."""
    missing: list[Path] = []
    current = path
    while not current.is_dir():
        missing.append(current)
        if current.parent == current:
            break
        current = current.parent
    for directory in reversed(missing):
        try:
            directory.mkdir()
        except FileExistsError:
            continue  # a concurrent writer made it (and sets its mode), or a file is in the way: the next step says so
        directory.chmod(DIR_MODE)
