"""The few named exceptions the library raises.

The CLI turns each into a one-line error and a non-zero exit; hooks turn them into a log line and exit 0.
"""

from __future__ import annotations

from pathlib import Path


class CortexError(Exception):
    """Base class: every error cortex reports to a person."""


class MalformedMemory(CortexError):
    """A memory file (or a memory about to be written) is not valid."""

    def __init__(self, path: Path | str | None, reason: str) -> None:
        self.path = Path(path) if path is not None else None
        self.reason = reason
        where = str(self.path) if self.path is not None else "memory"
        super().__init__(f"{where}: {reason}")


class NotInitialised(CortexError):
    """No `.cortex/` store was found where one was expected."""

    def __init__(self, start: Path) -> None:
        self.start = start
        super().__init__(f"no cortex store in {start} or above; run `cortex init` first")


class NotARepository(CortexError):
    """A git-only feature was asked for outside a git repository."""


class MemoryNotFound(CortexError):
    """No memory matches an id, id prefix or query."""


class QueryRefused(CortexError):
    """A query with nothing to search for (empty, or only common words)."""


class AmbiguousId(CortexError):
    """An id prefix matches more than one memory."""

    def __init__(self, prefix: str, matches: list[str]) -> None:
        self.prefix = prefix
        self.matches = matches
        shown = ", ".join(sorted(matches)[:5])
        super().__init__(f"id prefix {prefix!r} matches {len(matches)} memories ({shown}); give more characters")


class ConfigError(CortexError):
    """`.cortex/config.yaml` cannot be read."""


class SecretDetected(CortexError):
    """Text about to be written to a memory looks like it holds a secret."""

    def __init__(self, path: Path | str | None, rule: str, line: int | None = None) -> None:
        self.path = Path(path) if path is not None else None
        self.rule = rule
        self.line = line
        where = f"{self.path}" if self.path is not None else "memory"
        at = f" line {line}" if line else ""
        super().__init__(f"{where}{at}: looks like a secret ({rule}); memories are pushed to remotes, so it was not written")


class LockBusy(CortexError):
    """Another process held a lock longer than this one waits for it (`cortex.files.lock_wait`)."""

    def __init__(self, path: Path | str, holder: str | None = None) -> None:
        self.path = Path(path)
        self.holder = holder
        super().__init__(f"{holder or 'another process'} holds {_shown(self.path)}; try again when it finishes")


def _shown(path: Path) -> str:
    """`path` relative to the working folder when it is inside it (`.cortex/state/write.lock`), else whole."""
    import os

    try:
        relative = os.path.relpath(path)
    except ValueError:  # another drive (Windows)
        return str(path)
    return str(path) if relative.startswith("..") else relative
