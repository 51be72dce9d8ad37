"""What `cortex init --codex / --gemini / --cursor` share: merging hook entries, MCP servers and marked sections.

Only cortex's own entries are touched, a second run changes nothing, and a file cortex cannot merge into
stops the install before anything is written. docs/assistants.md.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from cortex import claude
from cortex.claude import RULES
from cortex.errors import CortexError
from cortex.files import atomic_write

# One of each for Claude Code, Codex, Gemini and Cursor (reading and writing a settings file, the hook command, the
# merge and the removal of hooks and of the MCP server).
load_json, write_json, object_at = claude.load_json, claude.write_json, claude.object_at
hook_command, merge_hooks, remove_hooks = claude.hook_command, claude.merge_hooks, claude.remove_hooks
merge_server, remove_server, save_or_remove = claude.merge_server, claude.remove_server, claude.save_or_remove

RULES_BEGIN = "<!-- cortex:rules:begin (written by cortex init; cortex uninstall removes it) -->"
RULES_END = "<!-- cortex:rules:end -->"


def prune(*folders: Path) -> None:
    """Remove these folders when an uninstall left them empty (innermost first)."""
    for folder in folders:
        with contextlib.suppress(OSError):  # not empty, or not there
            folder.rmdir()


def _section(path: Path) -> tuple[str, int, int]:
    """The file's text and where cortex's marked section starts and ends (-1, -1: none); no end marker is an error."""
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    start = text.find(RULES_BEGIN)
    if start < 0:
        return text, -1, -1
    end = text.find(RULES_END, start)
    if end < 0:
        raise CortexError(f"{path}: '{RULES_BEGIN[:24]} …' has no matching '{RULES_END}'; fix the file and run again")
    return text, start, end + len(RULES_END)


def check_section(path: Path) -> None:
    """Refuse (before anything is written) an instructions file whose cortex section has no end marker."""
    _section(path)


def write_section(path: Path) -> list[str]:
    """Add (or bring up to date) cortex's marked rules section in an instructions file; text around it is kept."""
    text, start, end = _section(path)
    section = f"{RULES_BEGIN}\n{RULES.rstrip()}\n{RULES_END}\n"
    if start >= 0:
        new = text[:start] + section + text[end:].lstrip("\n")
    else:
        new = (text.rstrip("\n") + "\n\n" if text.strip() else "") + section
    if new == text:
        return []
    atomic_write(path, new)
    return [f"{'updated' if start >= 0 else 'added'} cortex's memory rules in {path}"]


def remove_section(path: Path) -> list[str]:
    text, start, end = _section(path)
    return [] if start < 0 else cut(path, text, start, end, "cortex's memory rules")


def cut(path: Path, text: str, start: int, end: int, what: str) -> list[str]:
    """Write the file without `text[start:end]`, or delete it when nothing else is left."""
    rest = (text[:start].rstrip("\n") + "\n\n" + text[end:].lstrip("\n")).strip("\n")
    if not rest.strip():
        path.unlink()
        return [f"removed {path}"]
    atomic_write(path, rest + "\n")
    return [f"removed {what} from {path}"]
