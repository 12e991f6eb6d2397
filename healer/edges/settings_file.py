"""The settings file read again when it changes (docs/observe.md): the models' modes follow a mounted
ConfigMap without a restart. One reader, two holders: the sidecar's Observer (healer/sidecar/observe.py) and
the Alertmanager receiver (healer/webhook/alerts.py), so both see the same modes by the same rule.

* Changed: by the file's inode, mtime and size (a ConfigMap's update swaps a symlink: a new inode).
* A file that does not load is refused once per version of it (``SettingsRefused``, the loader's error as its
  cause); the holder keeps the last good settings and says so.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from healer.settings import Settings


def file_stamp(path: str) -> tuple[int, int, int] | None:
    """What changes when a file is replaced or written; None when it cannot be read (not a file: settings
    built in code)."""
    try:
        stat = os.stat(path)  # follows the ConfigMap's ..data symlink
    except (OSError, ValueError):
        return None
    return (stat.st_ino, stat.st_mtime_ns, stat.st_size)


class SettingsRefused(Exception):
    """The changed settings file did not load (``__cause__``: the loader's error, naming the key)."""


class SettingsFile:
    """``source`` as last read. ``load``: the loader (healer/settings load_settings by default)."""

    def __init__(self, source: str, load: Callable[[str], Settings] | None = None) -> None:
        self.source = source
        self._load = load
        self._stamp = file_stamp(source)
        self._refused: tuple[int, int, int] | None = None

    def changed(self) -> Settings | None:
        """The settings read again if the file changed since it was last read; None when it did not (or is
        not a file, or this version of it was refused already). Raises SettingsRefused the first time a changed
        file does not load."""
        stamp = file_stamp(self.source)
        if stamp is None or stamp in (self._stamp, self._refused):
            return None
        try:
            fresh = self._loader()(self.source)
        except Exception as exc:  # any refusal: the file names the key; the caller keeps what it had
            self._refused = stamp
            raise SettingsRefused(str(exc)) from exc
        self._stamp, self._refused = stamp, None
        return fresh

    def _loader(self) -> Callable[[str], Settings]:
        if self._load is not None:
            return self._load
        from healer.settings import load_settings

        return load_settings
