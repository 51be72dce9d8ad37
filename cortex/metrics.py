"""Local metrics: `state/metrics.json`, private to this clone, shown by `cortex status`.

What is counted, by section:

- `capture`: runs, records read, memories written and updated, duplicates, and the last run's time and
  duration (the Stop hook, `cortex capture`, the LLM worker's captures);
- `llm`: calls of the LLM command, failures, and tokens in and out (estimated as characters / 4, the
  same estimate as the briefing's: `claude -p` prints no usage);
- `briefing`: builds, and the last one's size (tokens, characters, memories) and build time.

Counters add up; `last_*` values are replaced. Each update is a read, change and atomic replace under
`state/metrics.lock`, so two hooks finishing at once lose nothing, and a reader sees the old file or the
new one, never half. Nothing here is on the prompt hook's fast path: capture, the LLM command and a
briefing build are already seconds or tens of milliseconds; a cached briefing (the SessionStart fast
path) records nothing. Recording never fails the caller: an unwritable `state/` is ignored.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cortex.files import atomic_write, file_lock
from cortex.memory import now_iso

FILE = "metrics.json"


def read(state_dir: Path) -> dict[str, dict[str, Any]]:
    """The metrics so far ({} when none were recorded, or the file is unreadable)."""
    try:
        data = json.loads((state_dir / FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {name: dict(section) for name, section in data.items() if isinstance(section, dict)} \
        if isinstance(data, dict) else {}


def record(state_dir: Path, section: str, add: dict[str, float] | None = None,
           last: dict[str, Any] | None = None) -> None:
    """Add `add` to the section's counters and set its `last_*` values (and `last_at`, now). Best effort."""
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        with file_lock(state_dir / "metrics.lock"):
            data = read(state_dir)
            entry = data.setdefault(section, {})
            for key, amount in (add or {}).items():
                previous = entry.get(key, 0)
                entry[key] = (previous if isinstance(previous, (int, float)) else 0) + amount
            for key, value in (last or {}).items():
                entry[f"last_{key}"] = value
            entry["last_at"] = now_iso()
            atomic_write(state_dir / FILE, json.dumps(data, sort_keys=True, indent=1) + "\n", durable=False)
    except OSError:
        pass
