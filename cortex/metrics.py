"""Local metrics: `state/metrics.json`, private to this clone, shown by `cortex status`.

Each update is a read, change and atomic replace under a lock, so concurrent hooks lose nothing; recording
never fails the caller.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

from cortex.files import atomic_write, file_lock, read_json
from cortex.memory import now_iso

FILE = "metrics.json"


def read(state_dir: Path) -> dict[str, dict[str, Any]]:
    """The metrics so far ({} when none were recorded, or the file is unreadable)."""
    data = read_json(state_dir / FILE)
    return {name: dict(section) for name, section in data.items() if isinstance(section, dict)} \
        if isinstance(data, dict) else {}


def record(state_dir: Path, section: str, add: dict[str, float] | None = None,
           last: dict[str, Any] | None = None) -> None:
    """Add `add` to the section's counters and set its `last_*` values (and `last_at`, now). Best effort."""
    with contextlib.suppress(OSError):
        state_dir.mkdir(parents=True, exist_ok=True)
        with file_lock(state_dir / "metrics.lock"):
            data = read(state_dir)
            entry = data.setdefault(section, {})
            for key, amount in (add or {}).items():
                previous = entry.get(key, 0)
                entry[key] = (previous if isinstance(previous, (int, float)) else 0) + amount
            entry.update({f"last_{key}": value for key, value in (last or {}).items()})
            entry["last_at"] = now_iso()
            atomic_write(state_dir / FILE, json.dumps(data, sort_keys=True, indent=1) + "\n", durable=False)
