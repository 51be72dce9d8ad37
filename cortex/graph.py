"""The memory graph: links made when a memory is written, and who may make which link.

When a memory is written (`cortex remember`, capture, the MCP server) it is
compared with the store's other active memories:

- similarity in `graph.link_min`..`graph.link_max` (0.1–0.5): a `relates_to`
  link with `strength` = the similarity, written in the new memory's own
  file only; only the `graph.max_links` (5) strongest are kept, so a large
  store does not link everything to everything;
- similarity above `consolidate.candidate_threshold` (0.5) with a memory of
  the same type (its 5 closest): not linked, but flagged as a possible
  duplicate (`state/flagged.json`); the automatic consolidation judges the
  flagged pairs with its duplicate score (`cortex.consolidate.Judge`) and
  merges those above `consolidate.auto_threshold`.

Similarity is the cosine of the bundled model's vectors from the cache when
they are there; otherwise the Jaccard overlap of the two texts' words.
Links live in the new memory's front matter, so they are reviewed with it; the
older memory's file is never touched (two branches linking to one memory
would otherwise both edit it, and the second merge would conflict). The other
direction is derived in the cache (`Index.neighbours`): `relates_to` reads
both ways. Centrality (the links that touch a memory, weighted by strength)
is computed in the cache (`Index.centralities`) and feeds the ranking prior
and decay. Stores written before, with links on both memories, read the same.

`supersedes` is a person's statement ("this replaces that"): automation
(capture, consolidation, the LLM layer) that proposes one gets `contradicts`
instead (`automatic_links`).
"""

from __future__ import annotations

import json

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from cortex.files import atomic_write, file_lock
from cortex.memory import Link
from cortex.store import Store
from cortex.text import jaccard, words

NO_LINK_TYPES = ("code",)  # source code is never compared or embedded
FLAG_MOST = 5  # a new memory's possible duplicates: at most its 5 closest of its type (as consolidation looks)
# A store's mean vector is unreliable while it holds few memories: it is blended with the mean of these
# (generic developer memories, written for cortex) as if they were REFERENCE_WEIGHT memories of the store.
REFERENCE_WEIGHT = 20
REFERENCE_TEXTS = (
    "We use SQLite, not Postgres, for the local cache: no server to run.",
    "Tests run with pytest; use the tmp_path fixture instead of writing to /tmp.",
    "The API server is deployed to Kubernetes with a Helm chart.",
    "Secrets come from the secret manager at startup; never commit the .env file.",
    "The frontend is bundled with Vite; webpack was removed.",
    "Retries use exponential backoff capped at 30 seconds for all HTTP calls.",
    "Logging goes through structlog with JSON output; do not use print.",
    "The CI pipeline must finish in under ten minutes.",
    "Dates are stored as UTC ISO-8601 strings and converted to local time only in the UI.",
    "Background jobs run on a queue worker with Redis as the broker.",
    "Database migrations are written with Alembic and run on deploy.",
    "Feature flags live in a config file and are read at startup.",
    "Passwords are hashed with argon2.",
    "The mobile app talks to the backend over GraphQL, not REST.",
    "The Windows runner needs long paths enabled or checkout fails.",
    "Rate limiting is 100 requests per minute per API key.",
    "We pinned the library below 2.0 because the compiled extension breaks.",
    "Releases are tagged and published by a workflow on tag push.",
    "The parser now streams files line by line instead of loading them whole.",
    "Plan: split the billing module into its own service next quarter.",
)


@dataclass
class LinkReport:
    linked: list[tuple[str, str, float]] = field(default_factory=list)  # (new id, other id, strength)
    flagged: list[tuple[str, str, float]] = field(default_factory=list)
    method: str = "cosine"


def automatic_links(links: Iterable[Link]) -> list[Link]:
    """Links proposed by automation: a `supersedes` becomes `contradicts` (only a person may supersede)."""
    out = []
    for link in links:
        out.append(Link("contradicts", link.to, link.strength) if link.rel == "supersedes" else link)
    return out


class Similarity:
    """Similarity between the store's memories: centred cosine on the cache's vectors, or Jaccard without them.

    Static embeddings of any two memories of one project point much the same
    way (raw cosine between unrelated memories of the example store: median
    0.63), so the raw cosine says little. The store's mean vector is taken
    out first (blended with a fixed reference mean while the store is small)
    and the cosine of what is left is the similarity: unrelated memories sit
    near 0, paraphrases high. See docs/graph.md for the measurements.
    """

    def __init__(self, store: Store, index: Any = None, centred: bool = True, method: str | None = None) -> None:
        from cortex.index import Index

        self.store = store
        self.centred = centred  # False: the raw cosine (compared in bench/consolidate.py)
        self.index = (index or Index(store)).ensure(vectors=True)
        self.vectors = self.index.vector_matrix()
        self.method = method or ("cosine" if self.vectors is not None else "jaccard")
        self._words: dict[str, set[str]] = {}
        self._centred: Any = None

    def records(self) -> dict[str, dict[str, Any]]:
        return self.index.records()

    def _matrix(self) -> Any:
        """Every cached vector, centred on the store's mean and normalised again (computed once)."""
        if self._centred is None:
            import numpy as np

            assert self.vectors is not None
            matrix, row_of = self.vectors
            rows = [row_of[e["vhash"]] for e in self.records().values()
                    if e["status"] == "active" and e.get("vhash") in row_of]
            total = matrix[rows].sum(axis=0) if rows else np.zeros(matrix.shape[1], dtype=np.float32)
            if self.centred:
                reference = self._reference()
                mean = (total + REFERENCE_WEIGHT * reference) / (len(rows) + REFERENCE_WEIGHT)
                centred = matrix - mean.astype(np.float32)
            else:
                centred = matrix
            norms = np.linalg.norm(centred, axis=1, keepdims=True)
            self._centred = centred / np.maximum(norms, 1e-9)
        return self._centred

    def _reference(self) -> Any:
        import numpy as np

        encoder = self.index.query_encoder()
        if encoder is None:
            return np.zeros(self.vectors[0].shape[1], dtype=np.float32) if self.vectors else 0.0
        return np.mean([np.asarray(encoder.encode_one(text), dtype=np.float32) for text in REFERENCE_TEXTS], axis=0)

    def vector(self, rel: str) -> Any:
        if self.vectors is None:
            return None
        _matrix, row_of = self.vectors
        row = row_of.get(self.records()[rel].get("vhash") or "")
        return None if row is None else self._matrix()[row]

    def matrix_for(self, rels: list[str]) -> Any:
        """The centred vectors of `rels` (a zero row where one is missing), or None without vectors."""
        if self.vectors is None:
            return None
        import numpy as np

        _matrix, row_of = self.vectors
        centred = self._matrix()
        rows = [row_of.get(self.records()[rel].get("vhash") or "", -1) for rel in rels]
        out = centred[np.asarray([r if r >= 0 else 0 for r in rows], dtype=np.int64)]
        out[np.asarray([r < 0 for r in rows], dtype=bool)] = 0.0
        return out

    def word_set(self, rel: str) -> set[str]:
        if rel not in self._words:
            from cortex.index.cache import read_body

            entry = self.records()[rel]
            title = json.loads(entry["meta"]).get("title", "")
            self._words[rel] = words(title + " " + read_body(self.store.memories_dir / rel))
        return self._words[rel]

    def against(self, rel: str, others: list[str]) -> list[float]:
        """Similarity of memory `rel` with each of `others` (0 when a vector is missing)."""
        if self.method == "cosine":
            import numpy as np

            mine = self.vector(rel)
            if mine is None or not others:
                return [0.0] * len(others)
            scores = self.matrix_for(others) @ mine
            return [float(s) for s in np.asarray(scores)]
        mine_words = self.word_set(rel)
        return [jaccard(mine_words, self.word_set(o)) for o in others]


JACCARD_CANDIDATE = 0.15  # without vectors: word overlap from which two memories are possible duplicates


def candidate_floor(threshold: float, method: str) -> float:
    """`consolidate.candidate_threshold` is a centred cosine; without vectors the similarity is word overlap,
    on which a paraphrase scores far lower (0.3 for a close one), so the floor is at most JACCARD_CANDIDATE."""
    return threshold if method == "cosine" else min(threshold, JACCARD_CANDIDATE)


def connect(store: Store, ids: Iterable[str], index: Any = None) -> LinkReport:
    """Link newly written memories to the store's active memories (see the module docstring)."""
    ids = [i for i in ids if i]
    report = LinkReport()
    if not ids:
        return report
    config = store.config()
    low, high = float(config.get("graph.link_min")), float(config.get("graph.link_max"))
    most = int(config.get("graph.max_links"))
    similarity = Similarity(store, index)
    report.method = similarity.method
    flag_at = candidate_floor(float(config.get("consolidate.candidate_threshold")), similarity.method)
    records = similarity.records()
    rel_of = {entry["id"]: rel for rel, entry in records.items()}
    active = [rel for rel, entry in records.items() if entry["status"] == "active" and entry["type"] not in NO_LINK_TYPES]
    new_links: dict[str, list[Link]] = {}
    done: set[str] = set()  # a batch's memories are compared with each other once, not twice
    for memory_id in dict.fromkeys(ids):
        rel = rel_of.get(memory_id)
        if rel is None or records[rel]["type"] in NO_LINK_TYPES:
            continue
        done.add(rel)
        mine = records[rel]
        already = {other for _r, other, _s in similarity.index.neighbours().get(memory_id, ())}
        others = [o for o in active if o not in done and records[o]["id"] not in already]
        scores = similarity.against(rel, others)
        band = sorted(((s, o) for s, o in zip(scores, others) if low <= s <= high), key=lambda p: (-p[0], p[1]))[:most]
        for score, other in band:
            strength = round(score, 2)
            other_id = records[other]["id"]
            new_links.setdefault(memory_id, []).append(Link("relates_to", other_id, strength))
            report.linked.append((memory_id, other_id, strength))
        pinned = json.loads(mine["meta"]).get("pinned", False)
        close = sorted(((s, o) for s, o in zip(scores, others) if s >= flag_at and records[o]["type"] == mine["type"]),
                       key=lambda p: (-p[0], p[1]))
        for score, other in close[:FLAG_MOST]:
            if not pinned and not json.loads(records[other]["meta"]).get("pinned", False):
                report.flagged.append((memory_id, records[other]["id"], round(score, 3)))
    for memory_id, links in sorted(new_links.items()):
        store.add_links(memory_id, links, path=store.memories_dir / rel_of[memory_id])
    if report.flagged:
        flag(store, report.flagged)
    return report


def flagged(store: Store) -> list[tuple[str, str, float]]:
    try:
        data = json.loads((store.state_dir / "flagged.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return [(str(a), str(b), float(s)) for a, b, s in data if isinstance(a, str)]


def flag(store: Store, pairs: list[tuple[str, str, float]]) -> None:
    """Remember near-duplicate pairs for the next consolidation (state/, never committed)."""
    with file_lock(store.state_dir / "flagged.lock"):
        known = {tuple(sorted((a, b))): s for a, b, s in flagged(store)}
        for a, b, s in pairs:
            known[tuple(sorted((a, b)))] = s
        atomic_write(store.state_dir / "flagged.json",
                     json.dumps([[a, b, s] for (a, b), s in sorted(known.items())]), durable=False)


def _unflag(store: Store, drop: Callable[[str, str], bool]) -> None:
    with file_lock(store.state_dir / "flagged.lock"):
        kept = [[a, b, s] for a, b, s in flagged(store) if not drop(a, b)]
        atomic_write(store.state_dir / "flagged.json", json.dumps(kept), durable=False)


def clear_flags(store: Store, ids: Iterable[str]) -> None:
    """Forget every flagged pair holding one of these memories (merged or gone)."""
    gone = set(ids)
    _unflag(store, lambda a, b: a in gone or b in gone)


def clear_flagged_pairs(store: Store, pairs: Iterable[tuple[str, str]]) -> None:
    """Forget these flagged pairs (judged by a consolidation run); pairs flagged since stay."""
    judged = {tuple(sorted(pair)) for pair in pairs}
    _unflag(store, lambda a, b: tuple(sorted((a, b))) in judged)


# ---------------------------------------------------------------- the link queue
# Capture writes memories on the Stop hook's clock and queues their ids here (`state/maintain.json`); the
# detached `cortex maintain` links them (`cortex.maintain`), off the clock.


def queue_links(store: Store, ids: Iterable[str]) -> None:
    """Queue memories to be linked by the next `cortex maintain`."""
    ids = [i for i in ids if i]
    if not ids:
        return
    with file_lock(store.state_dir / "maintain.lock"):
        pending = queued_links(store)
        pending.extend(i for i in ids if i not in pending)
        atomic_write(store.state_dir / "maintain.json", json.dumps(pending), durable=False)


def queued_links(store: Store) -> list[str]:
    try:
        data = json.loads((store.state_dir / "maintain.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return [str(i) for i in data] if isinstance(data, list) else []


def unqueue_links(store: Store, done: Iterable[str]) -> None:
    """Drop linked ids from the queue (only once linked: a run killed before keeps its queue)."""
    gone = set(done)
    with file_lock(store.state_dir / "maintain.lock"):
        left = [i for i in queued_links(store) if i not in gone]
        atomic_write(store.state_dir / "maintain.json", json.dumps(left), durable=False)


def connect_quietly(store: Store, ids: Iterable[str], index: Any = None) -> LinkReport | None:
    """`connect` for hooks and writers that must not fail because linking did: logs instead."""
    ids = list(ids)
    try:
        return connect(store, ids, index)
    except Exception as exc:  # linking is a bonus; the memory is already written
        store.log(f"graph: linking {list(ids)} failed: {exc!r}")
        return None
