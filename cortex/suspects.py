"""The suspects queue: pairs of active memories that cannot both hold, for a person to look at (docs/graph.md).

A pair is raised when two active memories on one subject disagree (`cortex.claims.contradiction`: a value, a
unit, a negation, a denial, a permission against a prohibition), or when automation linked them `contradicts`.
`kind` is "drift" when they only state different values and nothing links them (two notes nobody connected
drifted apart), "contradiction" otherwise. Candidates are each memory's nearest neighbours in the index (its
vector neighbours, or full-text ones without vectors), never every pair of the store.

A person who looked at a pair and found nothing wrong clears it: one small committed file per pair,
`.cortex/cleared/<id>-<id>.json`, so the pair is never raised again on any clone, and two branches clearing
different pairs add different files (they merge without a conflict).
"""

from __future__ import annotations

import contextlib
import heapq
import json
import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Iterable

from cortex.claims import VALUE_REASONS, Statement, contradiction, statement
from cortex.errors import CortexError
from cortex.files import atomic_write, read_json
from cortex.memory import ID_RE, now_iso
from cortex.store import Store

FOLDER = "cleared"
NEIGHBOURS = 8  # each memory is compared with its 8 nearest active memories on its subject
RARE = 4  # the rarest words of a title find its neighbours
COMMON = 50  # a word in more titles than this names no subject
SHARED = 0.5  # two memories on one subject share at least half the rarer-word weight of the smaller title
TEXT_MOST = 600  # characters of a memory's text read for claims: its title and the start of its body
NO_TYPES = ("code",)  # source code records are no statements
SMALL = 1000  # active memories up to which `cortex status` checks the queue itself when none was kept


@dataclass(frozen=True)
class Suspect:
    """Two active memories that cannot both hold, and why."""

    a: str
    a_title: str
    b: str
    b_title: str
    kind: str  # "contradiction" | "drift"
    reason: str

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


def pair(a: str, b: str) -> tuple[str, str]:
    """A pair in one order, whichever way it was named."""
    return (a, b) if a <= b else (b, a)


def folder(store: Store) -> Path:
    return store.root / FOLDER


def cleared(store: Store) -> set[tuple[str, str]]:
    """The pairs a person cleared (file names `<id>-<id>.json`; anything else in the folder is ignored)."""
    out: set[tuple[str, str]] = set()
    where = folder(store)
    if not where.is_dir():
        return out
    for path in where.glob("*.json"):
        a, _, b = path.stem.partition("-")
        if ID_RE.match(a) and ID_RE.match(b):
            out.add(pair(a, b))
    return out


def clear(store: Store, pairs: Iterable[tuple[str, str]]) -> list[Path]:
    """Record that a person cleared each pair (ids or unique prefixes): it is never raised again. Every id is
    checked before anything is written; returns the files written."""
    resolved = []
    for a, b in pairs:
        first, second = store.get(a).id, store.get(b).id  # NotFound / Ambiguous name the id
        if first == second:
            raise CortexError(f"{a} and {b} are one memory: a pair needs two")
        resolved.append(pair(first, second))
    written = []
    for a, b in dict.fromkeys(resolved):
        path = folder(store) / f"{a}-{b}.json"
        if not path.exists():
            atomic_write(path, json.dumps({"a": a, "b": b, "cleared": now_iso()}, indent=1) + "\n")
        written.append(path)
    return written


def kept(store: Store, index: Any) -> tuple[int, bool] | None:
    """(size of the queue, whether it is current) for `cortex status`, which must stay quick: the queue kept by
    the last `find` while nothing changed, else the queue itself in a small store; in a big one the last kept
    queue (`cortex suspects`, or the upkeep after a Stop, brings it up to date), None when nobody checked yet
    (a fresh clone's first check compares every memory's neighbours)."""
    checked = _Checked(store)
    rows = index.records().column("status", "type", "vhash", "links")
    current = checked.queue is not None and checked.queue[0] == _made_of(checked, rows, cleared(store))
    if checked.queue is not None and current:
        return len(checked.queue[1]), True
    if sum(status == "active" for _rel, status, *_rest in rows) <= SMALL:
        return len(find(store, index)), True
    return (len(checked.queue[1]), False) if checked.queue is not None else None


def _made_of(checked: _Checked, rows: list[Any], done: set[tuple[str, str]]) -> str:
    import hashlib

    return hashlib.sha1(repr((checked.rules, rows, sorted(done))).encode("utf-8")).hexdigest()


def find(store: Store, index: Any = None) -> list[Suspect]:
    """The open pairs among the store's active memories, contradictions first. The queue is kept in
    `state/suspects.json` with what it was made of (each memory's text hash, status and links, the cleared
    pairs, the rules): asked again with nothing changed, it is read back."""
    from cortex.index import Index

    index = (index or Index(store)).ensure()
    records = index.records()
    done = cleared(store)
    checked = _Checked(store)
    rows = records.column("status", "type", "vhash", "links")
    made_of = _made_of(checked, rows, done)
    if checked.queue is not None and checked.queue[0] == made_of:
        return [Suspect(**row) for row in checked.queue[1]]
    active = [rel for rel, status, kind, _vhash, _links in rows if status == "active" and kind not in NO_TYPES]
    id_of = {rel: records.value(rel, "id") for rel in active}
    rel_of = {memory_id: rel for rel, memory_id in id_of.items()}
    linked: dict[tuple[str, str], set[str]] = {}
    for rel in active:
        for kind, to, _strength in records.value(rel, "links") or ():
            if to in rel_of:
                linked.setdefault(pair(id_of[rel], to), set()).add(kind)
    said: dict[str, Statement] = {}

    def statement_of(rel: str) -> Statement:
        if rel not in said:
            said[rel] = statement(_text(index, rel)[:TEXT_MOST])
        return said[rel]

    found: dict[tuple[str, str], Suspect] = {}

    def raise_pair(x: str, y: str, kind: str, reason: str) -> None:
        key = pair(id_of[x], id_of[y])
        if key in done or key in found:
            return
        first, second = (x, y) if id_of[x] == key[0] else (y, x)
        found[key] = Suspect(key[0], _title(records, first), key[1], _title(records, second), kind, reason)

    for (a, b), kinds in sorted(linked.items()):  # automation's (or a person's) `contradicts` links
        if "contradicts" in kinds:
            raise_pair(rel_of[a], rel_of[b], "contradiction", "a contradicts link")
    titles = {rel: _title(records, rel) for rel in active}
    texts = {rel: vhash for rel, _status, _kind, vhash, _links in rows}
    for x, y in sorted(_candidates(titles, active)):
        key = pair(id_of[x], id_of[y])
        if key in done or key in found:
            continue
        if id_of[x] != key[0]:
            x, y = y, x  # the reason names a's side first
        reason = checked.get(texts.get(x), texts.get(y), lambda: contradiction(statement_of(x), statement_of(y)))
        if reason is None:
            continue
        value = reason.split(":", 1)[0] in VALUE_REASONS
        raise_pair(x, y, "drift" if value and key not in linked else "contradiction", reason)
    queue = sorted(found.values(), key=lambda s: (s.kind != "contradiction", s.a, s.b))
    checked.save(made_of, queue)
    return queue


class _Checked:
    """The verdicts on pairs of texts already compared (`state/suspects.json`, never committed), by the two
    texts' hashes: a store's queue after one new memory compares only that memory's pairs again; and the last
    queue with what it was made of. Any change to the rules (cortex/claims.py, this file) starts it afresh."""

    def __init__(self, store: Store) -> None:
        import hashlib

        import cortex.claims

        self.path = store.state_dir / "suspects.json"
        rules = Path(cortex.claims.__file__).read_bytes() + Path(__file__).read_bytes()
        self.rules = hashlib.sha1(rules).hexdigest()[:12]
        data = read_json(self.path)
        ok = isinstance(data, dict) and data.get("rules") == self.rules and isinstance(data.get("pairs"), dict)
        self.known: dict[str, str] = data["pairs"] if ok else {}  # type: ignore[index]
        queue = data.get("queue") if ok else None  # type: ignore[union-attr]
        self.queue = (queue[0], queue[1]) if isinstance(queue, list) and len(queue) == 2 else None
        self.used: dict[str, str] = {}

    def get(self, a: str | None, b: str | None, check: Any) -> str | None:
        if not a or not b:
            return check()  # type: ignore[no-any-return]
        key = "".join(sorted((a[:12], b[:12])))
        if key not in self.known:
            self.known[key] = check() or ""
        self.used[key] = self.known[key]
        return self.used[key] or None

    def save(self, made_of: str, queue: list[Suspect]) -> None:
        """Keep this queue and the verdicts on its pairs (the others' texts are gone or no longer neighbours)."""
        data = {"rules": self.rules, "pairs": self.used, "queue": [made_of, [row.as_dict() for row in queue]]}
        with contextlib.suppress(OSError):
            atomic_write(self.path, json.dumps(data, sort_keys=True), durable=False)


def _title(records: Any, rel: str) -> str:
    return str(json.loads(records.value(rel, "meta")).get("title", ""))


def _text(index: Any, rel: str) -> str:
    """The text the memory's vector is made of (`embed_text`: its hash is the record's `vhash`)."""
    from cortex.index.manifest import embed_text, read_body

    return embed_text(replace(index.memory(rel), body=read_body(index.store.memories_dir / rel)))


def _candidates(titles: dict[str, str], rows: list[str]) -> set[tuple[str, str]]:
    """Each of `rows` with its nearest memories on one subject, as (path, path) in path order: the memories whose
    titles share the most of its rarest words (a word in many titles names no subject), weighed by how rare,
    and at least half of the smaller title's weight (two memories on one thing, not two with one template)."""
    from cortex.claims import subject_words

    words_of = {rel: subject_words(title) for rel, title in titles.items()}
    postings: dict[str, list[str]] = {}
    for rel, words in words_of.items():
        for word in words:
            postings.setdefault(word, []).append(rel)
    total = len(titles)
    weight = {word: math.log(1 + total / len(rels)) for word, rels in postings.items()}
    mass = {rel: sum(weight[w] for w in words) for rel, words in words_of.items()}
    out: set[tuple[str, str]] = set()
    for rel in rows:
        rare = sorted(words_of[rel], key=lambda w: (len(postings[w]), w))[:RARE]
        score: dict[str, float] = {}
        for word in rare:
            if len(postings[word]) > COMMON:
                continue
            for other in postings[word]:
                if other != rel:
                    score[other] = score.get(other, 0.0) + weight[word]
        if not score:
            continue
        for other in heapq.nsmallest(NEIGHBOURS, score, key=lambda o: (-score[o], o)):
            shared = sum(weight[w] for w in words_of[rel] & words_of[other])
            if shared >= SHARED * min(mass[rel], mass[other]):
                out.add(pair(rel, other))
    return out
