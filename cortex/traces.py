"""Traces of forgotten memories: what a person archived or deleted leaves a small committed record (its id, title,
a fingerprint of its text, when and why), so writing the same thing again can say it was forgotten, and why.

One file per trace, `.cortex/forgotten/<id>.json`: it travels with the branch like the memories, and two branches
forgetting different memories add different files, so they merge without a conflict. A trace never holds the text
itself, only hashes of it, and its title and reason pass through the one secret rule (`cortex.guard.redacted`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from cortex.files import atomic_write
from cortex.guard import redacted
from cortex.memory import ID_RE, Memory, now_iso
from cortex.store import Store
from cortex.text import jaccard, words

FOLDER = "forgotten"
REASON_MAX = 500  # characters of a reason kept
NEAR = 0.7  # word overlap (Jaccard) from which a new text repeats a forgotten one: capture's JACCARD_DUPLICATE


@dataclass
class Trace:
    id: str
    title: str
    type: str
    forgotten: str  # when, as written in files
    how: str  # archived | deleted
    reason: str = ""
    fingerprint: str = ""  # the normalised text's hash: the same text again
    words: list[str] = field(default_factory=list)  # each content word's short hash: a very close text again

    def said(self) -> str:
        """One line for a warning: what was forgotten, when, and why."""
        why = f": {self.reason}" if self.reason else " (no reason given)"
        return f"{self.id} \"{self.title}\" was {self.how} on {self.forgotten[:10]}{why}"


def folder(store: Store) -> Path:
    return store.root / FOLDER


def _text(title: str, body: str) -> str:
    return redacted(f"{title}\n{body}")


def fingerprint(title: str, body: str) -> str:
    """The hash of the text with case and spacing normalised (its secrets redacted first, as the trace never
    keeps a secret's hash either)."""
    return hashlib.sha256(" ".join(_text(title, body).lower().split()).encode("utf-8")).hexdigest()[:32]


def word_hashes(title: str, body: str) -> list[str]:
    return sorted({hashlib.blake2b(word.encode("utf-8"), digest_size=4).hexdigest()
                   for word in words(_text(title, body))})


def leave(store: Store, memory: Memory, how: str, reason: str | None = None) -> Trace:
    """Write the trace of `memory`, just archived or deleted (one file; a second forget of it replaces it)."""
    trace = Trace(id=memory.id, title=redacted(memory.title), type=memory.type, forgotten=now_iso(), how=how,
                  reason=redacted(" ".join((reason or "").split())[:REASON_MAX]),
                  fingerprint=fingerprint(memory.title, memory.body), words=word_hashes(memory.title, memory.body))
    atomic_write(folder(store) / f"{memory.id}.json", json.dumps(asdict(trace), indent=1, sort_keys=True) + "\n")
    return trace


def drop(store: Store, memory_id: str) -> bool:
    """Remove a memory's trace (it was restored: live again); whether there was one."""
    path = folder(store) / f"{memory_id}.json"
    if not path.is_file():
        return False
    path.unlink()
    return True


def read_all(store: Store) -> list[Trace]:
    """Every trace in the store; a file that is not one (edited by hand, a conflict) is skipped."""
    out = []
    try:
        paths = sorted(folder(store).glob("*.json"))
    except OSError:
        return []
    for path in paths:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            trace = Trace(**{key: data[key] for key in Trace.__dataclass_fields__ if key in data})
        except (OSError, ValueError, TypeError):
            continue
        if ID_RE.match(str(trace.id)) and isinstance(trace.words, list):
            out.append(trace)
    return out


def repeated(store: Store, title: str, body: str) -> list[Trace]:
    """The forgotten memories a new text repeats: the same normalised text, or words overlapping by `NEAR`."""
    traces = read_all(store)
    if not traces:
        return []
    mine, hashes = fingerprint(title, body), set(word_hashes(title, body))
    return [trace for trace in traces
            if trace.fingerprint == mine or (hashes and jaccard(hashes, set(trace.words)) >= NEAR)]
