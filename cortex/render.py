"""A memory as text, in three forms: short (the briefing), medium (recall), full (`cortex show`).

Each form is a pure function of the memory, so the same memory renders to the same bytes whatever its
file's key order or comments.
"""

from __future__ import annotations

import functools
import re
from typing import Any, Callable, Iterable

from cortex.guard import redacted
from cortex.memory import KEYS, Memory

LOW_CONFIDENCE = 0.5  # under this (decayed) confidence a memory reads as unsure in the briefing
SHORT_SUMMARY = 90


def _adds(summary: str, title: str) -> bool:
    """Whether a summary says something the title does not (not empty, not the title again)."""
    a, b = " ".join(summary.casefold().split()).rstrip(".…"), " ".join(title.casefold().split()).rstrip(".…")
    return bool(a) and not (a.startswith(b) and len(a) - len(b) < 12) and not b.startswith(a)


def _past(text: str, said: str) -> int | None:
    """Where `text` goes on past `said` when it begins with it, case and spacing aside (a title cut with "…"
    counts as its beginning); None when it does not begin with it."""
    head = "".join(said.split()).rstrip(".…").casefold()
    if not head:
        return None
    at, taken = 0, 0
    while taken < len(head) and at < len(text):
        if text[at].isspace():
            at += 1
        elif text[at].casefold() == head[taken]:
            at, taken = at + 1, taken + 1
        else:
            return None
    if taken < len(head) or (at < len(text) and text[at].isalnum()):
        return None  # ends mid-word: "Use SQLite" does not begin "Use SQLiteDB"
    while at < len(text) and (text[at].isspace() or text[at] in ".…,;:—-"):
        at += 1
    return at


def _beyond(text: str, said: str) -> tuple[str, int]:
    """`text` without the beginning `said` already said ("…" in front when that leaves it mid-sentence), and
    how far its characters moved (to shift marks by)."""
    at = _past(text, said)
    if not at:
        return text, 0
    rest = text[at:]
    if rest and said.rstrip().endswith("…") and not text[:at].rstrip().endswith("."):
        return "…" + rest, at - 1
    return rest, at


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit].rsplit(" ", 1)[0].rstrip(" ,;:—-") + "…"


def confidence_mark(confidence: float) -> str:
    """`(low confidence 0.42)` under LOW_CONFIDENCE, else nothing."""
    return f"(low confidence {confidence:.2f})" if confidence < LOW_CONFIDENCE else ""


def short(memory: Memory, marks: Iterable[str] = (), confidence: float | None = None) -> str:
    """One line: `[type] Title — summary `id`` then the marks (low confidence, stale, conflicts)."""
    summary = memory.one_line()
    line = f"[{memory.type}] {memory.title}"
    if _adds(summary, memory.title):  # what the summary says past the title (a cut title goes on, not again)
        line += f" — {_cut(_beyond(summary, memory.title)[0], SHORT_SUMMARY)}"
    line += f" `{memory.id}`"
    shown = [confidence_mark(memory.confidence if confidence is None else confidence), *marks]
    return line + "".join(f" {mark}" for mark in shown if mark)


def highlight(text: str, spans: Iterable[tuple[int, int]]) -> str:
    """`text` with each (start, end) span wrapped in `**`."""
    out, at = [], 0
    for start, end in sorted(spans):
        if start < at:
            continue
        out += [text[at:start], "**", text[start:end], "**"]
        at = end
    return "".join(out) + text[at:]


def medium(memory: Memory, snippet: str = "", spans: Iterable[tuple[int, int]] = (), where: str = "",
           indent: str = "") -> str:
    """A few lines: the heading (id, type, title, status, `where` it came from), then only what the title does
    not already say: the snippet past the title (the part of the body that answers, its matches marked), and the
    facts."""
    status = "" if memory.status == "active" else f" ({memory.status})"
    lines = [f"{memory.id}  {memory.type:<12} {memory.title}{status}{where}"]
    rest, moved = _beyond(snippet, memory.title)
    if rest:
        lines.append(f"{indent}{highlight(rest, [(a - moved, b - moved) for a, b in spans if a >= moved])}")
    facts = [f"confidence {memory.confidence:.2f}", f"priority {memory.priority}", "pinned" if memory.pinned else "",
             f"branch {memory.branch}" if memory.branch else "", f"project {memory.project}" if memory.project else "",
             "tags " + ", ".join(memory.tags) if memory.tags else "",
             "files " + ", ".join(memory.files) if memory.files else ""]
    lines.append(indent + " · ".join(fact for fact in facts if fact))
    return "\n".join(map(redacted, lines))  # the one secret rule, line by line: what recall shows names a secret


def _value(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(str(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{key}: {_value(value[key])}" for key in sorted(value, key=str)) + "}"
    return str(value)


def full(memory: Memory) -> str:
    """Every field, one per line in the canonical order, each link on a line, unknown keys, then the body."""
    data = memory.to_dict()
    lines = []
    for key in KEYS:
        if key == "links":
            continue
        value = data.get(key)
        if key in ("summary", "project", "branch") and not value:
            continue
        lines.append(f"{key}: {_value(value)}")
    lines += [f"{key}: {_value(memory.extra[key])}" for key in sorted(memory.extra)]
    if memory.links:
        lines.append("links:")
        for link in memory.links:
            parts = [link.rel, link.to]
            if link.strength is not None:
                parts.append(f"strength {link.strength:g}")
            if link.created:
                parts.append(f"made {link.created}")
            lines.append("  - " + " ".join(parts))
    body = memory.body.rstrip("\n")
    return redacted("\n".join(lines) + ("\n\n" + body if body else "") + "\n")  # the one secret rule, as `medium`


SNIPPET_CHARS = 160  # what a hit shows of a longer body at most: the part that answers, not the file
SHORT_BODY = 200  # a body up to this long is shown whole
_SENTENCE_END = re.compile(r"(?<!\b\d\.)(?<=[.!?])\s+")
_LINE_MARKS = re.compile(r"\*\*|__|^#+\s*|^[-*]\s+")


def sentences(body: str) -> list[str]:
    """The sentences of a body, a line break ending one too (a list's items, a heading), markdown marks off."""
    out: list[str] = []
    for line in body.splitlines():
        line = " ".join(_LINE_MARKS.sub("", line.strip()).split())
        out += [part for part in _SENTENCE_END.split(line) if part]
    return out


def answering_part(body: str, query: str, terms: Callable[[str], list[str]], title: str = "",
                   width: int = SNIPPET_CHARS, common: frozenset[str] = frozenset()) -> str:
    """What a hit shows of its body: the sentence holding most of the query's words that `title` does not, then
    the next one holding a word neither holds when both fit in `width`; "…" where sentences were skipped; one
    longer than `width` cut around its first match. Nothing when no sentence holds such a word, unless the title
    was cut ("…"): then the first sentence, which goes on where the title stopped. A body within SHORT_BODY, whole.
    `terms`: the words of a text as the full-text index reads them (`cortex.index.fulltext.terms`); `common`: words
    of the query many memories hold, which pick no sentence."""
    parts = sentences(body)
    if not parts or len(" ".join(parts)) <= SHORT_BODY:
        return " ".join(parts)  # a short body is all of its answer
    wanted = set(terms(query)) - set(terms(title)) - common
    held = [wanted & set(terms(part)) for part in parts]
    chosen = [min(range(len(parts)), key=lambda i: (-len(held[i]), i))]
    if not held[chosen[0]] and not title.endswith("…"):
        return ""  # no sentence bears on the query past what the title says: `cortex show` has the rest
    more = [i for i in range(len(parts)) if held[i] - held[chosen[0]]]
    if more:
        best = min(more, key=lambda i: (-len(held[i] - held[chosen[0]]), i))
        if len(parts[chosen[0]]) + len(parts[best]) + 2 <= width:
            chosen.append(best)
    chosen.sort()
    text = " ".join(("…" if i > (chosen[n - 1] + 1 if n else 0) else "") + parts[i] for n, i in enumerate(chosen))
    if len(text) <= width:
        return text
    found = _query_pattern(query)
    match = found.search(text) if found is not None else None
    start = max(0, (match.start() if match else 0) - width // 4)
    if start:  # begin at a word, not in the middle of one
        space = text.rfind(" ", 0, start + 1)
        start = space + 1 if space >= 0 else 0
    return ("…" if start and not text.startswith("…") else "") + _cut(text[start:], width)


def match_spans(text: str, query: str) -> list[tuple[int, int]]:
    """Where the query's content words (stop words left out) occur in `text`, as (start, end) of whole words:
    a word matches one starting with it, or for a word over 4 letters with all but its last two ("retries"
    marks "retry" and "retried"), case ignored."""
    pattern = _query_pattern(query)
    return [(found.start(), found.end()) for found in pattern.finditer(text)] if pattern is not None else []


@functools.lru_cache(maxsize=64)
def _query_pattern(query: str) -> re.Pattern[str] | None:
    from cortex.text import words

    stems = sorted({w if len(w) <= 4 else w[:max(4, len(w) - 2)] for w in words(query)}, key=lambda w: (-len(w), w))
    if not stems:
        return None
    return re.compile(r"\b(?:" + "|".join(re.escape(stem) for stem in stems) + r")\w*", re.IGNORECASE)
