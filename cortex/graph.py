"""The memory graph: links made when a memory is written, and who may make which link.

Links live in the new memory's front matter only (the older file is never touched, so two branches
linking to one memory do not conflict); the other direction, centrality and link decay are derived at read
time. `supersedes` is a person's statement: automation proposes `contradicts` instead. docs/graph.md.
"""

from __future__ import annotations

import contextlib
import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable

from cortex.files import atomic_write, file_lock, read_json
from cortex.memory import Link, Memory, epoch
from cortex.store import Store
from cortex.text import jaccard, words

if TYPE_CHECKING:
    from cortex.index.cache import Records

DAY = 86400.0
STRONG_LINK = 0.4  # a relates_to link this strong (after decay) brings its other end into recall's results
NO_LINK_TYPES = ("code",)  # source code is never compared or embedded
FLAG_MOST = 5  # a new memory's possible duplicates: at most its 5 closest of its type (as consolidation looks)
# A small store's mean vector is blended with the mean of these generic memories, as if they were 20 of its own.
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
    suggested: list[tuple[str, str, float]] = field(default_factory=list)  # just under link_min: for review
    method: str = "cosine"


def automatic_links(links: Iterable[Link]) -> list[Link]:
    """Links proposed by automation: a `supersedes` becomes `contradicts` (only a person may supersede)."""
    return [Link("contradicts", link.to, link.strength) if link.rel == "supersedes" else link for link in links]


class Similarity:
    """Similarity between the store's memories: cosine centred on the store's mean vector (one project's static
    vectors all point much the same way; docs/graph.md), or Jaccard without vectors."""

    def __init__(self, store: Store, index: Any = None, centred: bool = True, method: str | None = None) -> None:
        from cortex.index import Index

        self.store = store
        self.centred = centred  # False: the raw cosine (compared in bench/consolidate.py)
        self.index = (index or Index(store)).ensure(vectors=True)
        self.vectors = self.index.vector_matrix()
        self.method = method or ("cosine" if self.vectors is not None else "jaccard")
        self._words: dict[str, set[str]] = {}
        self._centred: Any = None
        self._parts: Any = None  # (mean, each row's centred norm): `against` without a centred copy of the matrix

    def records(self) -> Records:
        return self.index.records()

    def _mean(self) -> Any:
        """The store's mean vector (active memories, blended with the reference mean), or zeros uncentred."""
        import numpy as np

        assert self.vectors is not None
        matrix, row_of = self.vectors
        if not self.centred:
            return np.zeros(matrix.shape[1], dtype=np.float32)
        rows = [row_of[vhash] for _, status, vhash in self.records().column("status", "vhash")
                if status == "active" and vhash in row_of]
        # Each active memory's row counted once per memory (two memories may share a text).
        counts = np.bincount(np.asarray(rows, dtype=np.int64), minlength=matrix.shape[0]).astype(np.float32)
        total = counts @ matrix if rows else np.zeros(matrix.shape[1], dtype=np.float32)
        return ((total + REFERENCE_WEIGHT * self._reference()) / (len(rows) + REFERENCE_WEIGHT)).astype(np.float32)

    def _matrix(self) -> Any:
        """Every cached vector, centred on the store's mean and normalised again (computed once)."""
        if self._centred is None:
            import numpy as np

            assert self.vectors is not None
            matrix, _row_of = self.vectors
            centred = matrix - self._mean() if self.centred else matrix
            norms = np.linalg.norm(centred, axis=1, keepdims=True)
            self._centred = centred / np.maximum(norms, 1e-9)
        return self._centred

    def _centring(self) -> tuple[Any, Any]:
        """(mean, each row's norm once centred), computed once: centred cosines without a centred copy of the matrix."""
        if self._parts is None:
            import numpy as np

            assert self.vectors is not None
            matrix, _row_of = self.vectors
            mean = self._mean()
            along = (matrix @ mean).astype(np.float64)
            squares = np.einsum("ij,ij->i", matrix, matrix, dtype=np.float64)
            norms = np.sqrt(np.maximum(squares - 2 * along + float(mean.astype(np.float64) @ mean), 0.0))
            self._parts = (mean, norms)
        return self._parts

    def _reference(self) -> Any:
        import numpy as np

        encoder = self.index.encoder()
        if encoder is None:
            return np.zeros(self.vectors[0].shape[1], dtype=np.float32) if self.vectors else 0.0
        return np.mean([np.asarray(encoder.encode_one(text), dtype=np.float32) for text in REFERENCE_TEXTS], axis=0)

    def matrix_for(self, rels: list[str]) -> Any:
        """The centred vectors of `rels` (a zero row where one is missing), or None without vectors."""
        if self.vectors is None:
            return None
        import numpy as np

        _matrix, row_of = self.vectors
        centred = self._matrix()
        records = self.records()
        rows = [row_of.get(records[rel].get("vhash") or "", -1) for rel in rels]
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
            if self.vectors is None or not others:
                return [0.0] * len(others)
            return [float(s) for s in self._row_scores(rel, self.pool_rows(others))]
        mine_words = self.word_set(rel)
        return [jaccard(mine_words, self.word_set(o)) for o in others]

    def above(self, rel: str, pool: list[str], rows: Any, floor: float) -> list[tuple[float, str]]:
        """(similarity, path) of the memories of `pool` at least `floor` similar to `rel` (`rows`: from `pool_rows`)."""
        if self.method == "cosine":
            import numpy as np

            scores = self._row_scores(rel, rows)
            return [(float(scores[i]), pool[i]) for i in np.flatnonzero(scores >= floor).tolist()]
        return [(s, o) for s, o in zip(self.against(rel, pool), pool) if s >= floor]

    def pool_rows(self, pool: list[str]) -> Any:
        """Each path's row in the vector matrix (-1 without a vector), for `above`; None without vectors."""
        if self.method != "cosine" or self.vectors is None:
            return None
        import numpy as np

        _matrix, row_of = self.vectors
        vhash = dict(self.records().column("vhash")) if len(pool) > 1000 else None  # one column, not a dict each
        records = self.records()
        return np.fromiter((row_of.get((vhash[o] if vhash is not None else records.value(o, "vhash")) or "", -1)
                            for o in pool), dtype=np.int64, count=len(pool))

    def _row_scores(self, rel: str, rows: Any) -> Any:
        """The centred cosine of `rel` with the memories at `rows` of the vector matrix (0 without a vector)."""
        import numpy as np

        assert self.vectors is not None
        matrix, row_of = self.vectors
        row = row_of.get(self.records()[rel].get("vhash") or "")
        if row is None:
            return np.zeros(len(rows))
        few = 4 * len(rows) < matrix.shape[0]  # a few others (consolidation's pairs): only their rows
        take = np.maximum(rows, 0)
        if self._centred is not None:  # the centred copy exists already (consolidation): use it
            centred = self._centred
            scores = ((centred[take] if few else centred) @ centred[row]).astype(np.float64)
        else:
            mean, norms = self._centring()
            mine = np.asarray(matrix[row], dtype=np.float32) - mean
            mine /= max(float(np.linalg.norm(mine)), 1e-9)
            # (b − mean)·mine / |b − mean|, without a centred copy of the matrix
            scores = ((matrix[take] if few else matrix) @ mine - float(mean @ mine)) / \
                np.maximum(norms[take] if few else norms, 1e-9)
        picked = scores if few else scores[take]
        picked[rows < 0] = 0.0
        return picked


JACCARD_CANDIDATE = 0.15  # without vectors: word overlap from which two memories are possible duplicates


def candidate_floor(threshold: float, method: str) -> float:
    """`consolidate.candidate_threshold`, at most JACCARD_CANDIDATE on word overlap (a paraphrase scores far lower)."""
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
    suggest_from = min(float(config.get("graph.suggest_min")), low)
    similarity = Similarity(store, index)
    report.method = similarity.method
    flag_at = candidate_floor(float(config.get("consolidate.candidate_threshold")), similarity.method)
    records = similarity.records()
    rel_of = similarity.index.rel_of_id()
    active = [rel for rel, status, kind in records.column("status", "type")
              if status == "active" and kind not in NO_LINK_TYPES]
    rows = similarity.pool_rows(active)
    floor = min(low, suggest_from, flag_at)  # nothing under it is linked, suggested or flagged
    new_links: dict[str, list[Link]] = {}
    done: set[str] = set()  # a batch's memories are compared with each other once, not twice
    for memory_id in dict.fromkeys(ids):
        rel = rel_of.get(memory_id)
        if rel is None or records[rel]["type"] in NO_LINK_TYPES:
            continue
        done.add(rel)
        mine = records[rel]
        # Already linked: its own links, and `relates_to` links other memories made to it.
        own = {to for _rel, to, _strength in mine.get("links", ())}
        found = [(s, o) for s, o in similarity.above(rel, active, rows, floor)  # two fields of each, no dict
                 if o not in done and records.value(o, "id") not in own
                 and not any(r == "relates_to" and to == memory_id for r, to, _s in records.value(o, "links") or ())]
        found.sort(key=lambda p: (-p[0], p[1]))  # strongest first
        band = [(s, o) for s, o in found if low <= s <= high][:most]
        for score, other in band:
            strength = round(score, 2)
            other_id = records.value(other, "id")
            new_links.setdefault(memory_id, []).append(Link("relates_to", other_id, strength))
            report.linked.append((memory_id, other_id, strength))
        near = [(s, o) for s, o in found if suggest_from <= s < low][:most]
        report.suggested += [(memory_id, records.value(o, "id"), round(s, 2)) for s, o in near]
        pinned = json.loads(mine["meta"]).get("pinned", False)
        close = [(s, o) for s, o in found if s >= flag_at and records.value(o, "type") == mine["type"]]
        for score, other in close[:FLAG_MOST]:
            if not pinned and not records.value(other, "pinned"):
                report.flagged.append((memory_id, records.value(other, "id"), round(score, 3)))
    for memory_id, links in sorted(new_links.items()):
        store.add_links(memory_id, links, path=store.memories_dir / rel_of[memory_id])
    if report.flagged:
        flag(store, report.flagged)
    if report.suggested:
        suggest(store, report.suggested)
    return report


def _state_list(store: Store, name: str) -> list[Any]:
    data = read_json(store.state_dir / name)
    return data if isinstance(data, list) else []


def _save_state(store: Store, name: str, data: list[Any]) -> None:
    atomic_write(store.state_dir / name, json.dumps(data), durable=False)


def suggestions(store: Store) -> list[tuple[str, str, float]]:
    """Suggested links as recorded: (new memory, other memory, similarity)."""
    return [(str(a), str(b), float(s)) for a, b, s in _state_list(store, "suggested.json") if isinstance(a, str)]


def suggest(store: Store, pairs: list[tuple[str, str, float]]) -> None:
    """Remember links just under the link threshold for a person to review (state/, never committed)."""
    with file_lock(store.state_dir / "suggested.lock"):
        known = {(a, b): s for a, b, s in suggestions(store)}
        known.update({(a, b): s for a, b, s in pairs})
        _save_state(store, "suggested.json", [[a, b, s] for (a, b), s in sorted(known.items())])


def pending_suggestions(store: Store, index: Any) -> list[tuple[str, str, float]]:
    """Suggestions whose two memories are still active and not linked yet, strongest first."""
    records, rel_of_id = index.records(), index.rel_of_id()

    def active(ident: str) -> bool:
        return ident in rel_of_id and records.value(rel_of_id[ident], "status") == "active"

    def linked(a: str, b: str) -> bool:  # either way: a link is written in one of the two files
        return any(to == b for _, to, _ in records.value(rel_of_id[a], "links")) \
            or any(to == a for _, to, _ in records.value(rel_of_id[b], "links"))

    out = [(a, b, s) for a, b, s in suggestions(store) if active(a) and active(b) and not linked(a, b)]
    return sorted(out, key=lambda p: (-p[2], p[0], p[1]))


def resolve_suggestion(store: Store, a: str, b: str, accept: bool) -> Link | None:
    """Write a suggested link (`accept`) as `relates_to` in `a`'s file, or dismiss it; either way it leaves
    the list. Raises `CortexError` when no such suggestion is pending."""
    from cortex.errors import CortexError

    a, b = store.get(a).id, store.get(b).id
    matching = [(x, y, s) for x, y, s in suggestions(store) if {x, y} == {a, b}]
    if not matching:
        raise CortexError(f"no suggested link between {a} and {b} (`cortex links --suggested` lists them)")
    made = None
    if accept:
        made = Link("relates_to", b, matching[0][2])
        store.add_links(a, [made])
    with file_lock(store.state_dir / "suggested.lock"):
        _save_state(store, "suggested.json", [[x, y, s] for x, y, s in suggestions(store) if {x, y} != {a, b}])
    return made


PERSON_RELATIONS = ("relates_to", "because", "refines", "exemplifies", "contradicts", "derived_from")


def link(store: Store, a: str, b: str, rel: str) -> tuple[Memory, Link | None]:
    """A person's link `a REL b`, written in `a`'s file (`cortex links add`); (a's memory, the link) or, when it
    was there already, (a's memory, None). Raises `CortexError` naming a bad id or relation; writes nothing then."""
    from cortex.errors import CortexError

    if rel not in PERSON_RELATIONS:
        hint = " (a replacement is `cortex forget OLD --replaced-by NEW`)" if rel == "supersedes" else ""
        raise CortexError(f"--rel: {rel!r} is not a relation a person links with{hint}; one of: "
                          f"{', '.join(PERSON_RELATIONS)}")
    first, second = store.get(a), store.get(b)  # an unknown id fails here
    if first.id == second.id:
        raise CortexError(f"{first.id}: a memory cannot be linked to itself")
    if any(each.rel == rel and each.to == second.id for each in first.links):
        return first, None
    made = Link(rel, second.id)
    return store.add_links(first.id, [made], first.path), made


def unlink(store: Store, a: str, b: str, rel: str | None = None) -> list[tuple[str, Link]]:
    """Remove every link between two memories (of relation `rel`, when given), written in either file
    (`cortex links remove`); returns (the id of the file it was in, the link). `b` may name a memory that no
    longer exists (a link left dangling). Raises `CortexError` when there is no such link."""
    from cortex.errors import CortexError, MemoryNotFound

    first = store.get(a)
    try:
        second_id: str | None = store.get(b).id
    except MemoryNotFound:
        second_id = None
    if second_id is None:  # gone: the id as a link of `a` spells it
        key = b.strip().lower()
        targets = sorted({link.to for link in first.links if link.to.startswith(key)}) if len(key) >= 4 else []
        if len(targets) != 1:
            raise CortexError(f"no memory with id {b!r}, and {first.id} has no link to one")
        second_id = targets[0]
    removed = [(first.id, link) for link in store.drop_links(
        first.id, lambda link: link.to == second_id and rel in (None, link.rel), first.path)]
    if second_id != first.id:
        with contextlib.suppress(MemoryNotFound):
            removed += [(second_id, link) for link in store.drop_links(
                second_id, lambda link: link.to == first.id and rel in (None, link.rel))]
    if not removed:
        kind = f"{rel} link" if rel else "link"
        raise CortexError(f"no {kind} between {first.id} and {second_id} (`cortex links {first.id}` lists its links)")
    return removed


REASONS_MOST = 3  # reasons a hit carries at most
REASONED_HITS = 3  # the first direct hits of a recall carry their reasons; the rest are not what was asked about


def reasons(store: Store, memory: Memory) -> list[Memory]:
    """What a hit carries as its reason: the active memories it links `because`, else those the memories it
    supersedes (back along the chain) linked `because` (a re-decided choice keeps the reason it was first given)."""
    from cortex.errors import CortexError

    found: dict[str, Memory] = {}
    seen, todo = {memory.id}, [memory]
    while todo and not found and len(seen) <= 100:  # the nearest generation that gave a reason
        generation, todo = todo, []
        for each in generation:
            for each_link in each.links:
                if each_link.to in seen or each_link.rel not in ("because", "supersedes"):
                    continue
                try:
                    other = store.get(each_link.to)
                except CortexError:  # deleted, or malformed: nothing to carry
                    continue
                if each_link.rel == "because" and other.status == "active":
                    found.setdefault(other.id, other)
                elif each_link.rel == "supersedes":
                    seen.add(other.id)
                    todo.append(other)
    return list(found.values())[:REASONS_MOST]


def hit_reasons(stores: Iterable[Store], hits: Iterable[Any]) -> dict[str, list[dict[str, str]]]:
    """Each recall hit's reasons (`reasons`) as {memory id: [{"id", "title"}]}, for the hits that have any: what
    `cortex recall` and MCP `cortex_search` show under the hit; only the first `REASONED_HITS` direct hits (and
    what is linked to them) carry them."""
    by_label = {store.label: store for store in stores}
    out: dict[str, list[dict[str, str]]] = {}
    direct = 0
    for hit in hits:
        direct += getattr(hit, "via", None) is None
        if direct > REASONED_HITS:
            break
        memory, store = hit.memory, by_label.get(hit.store)
        if store is None or not any(each.rel in ("because", "supersedes") for each in memory.links):
            continue
        found = reasons(store, memory)
        if found:
            out[memory.id] = [{"id": other.id, "title": other.title} for other in found]
    return out

class LastReads:
    """When memories were last recalled or shown (`state/access.json`), looked up one id at a time in the text:
    recall needs two or three ids of a file that grows with the store."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._text: str | None = None
        self._seen: dict[str, float] = {}

    def __call__(self, memory_id: str) -> float:
        if memory_id not in self._seen:
            if self._text is None:
                try:
                    self._text = (self.store.state_dir / "access.json").read_text(encoding="utf-8")
                except OSError:
                    self._text = ""
            found = re.search(r'"' + re.escape(memory_id) + r'":\s*\{[^{}]*?"last":\s*"([^"]*)"', self._text)
            try:
                self._seen[memory_id] = epoch(found.group(1)) if found else 0.0
            except ValueError:
                self._seen[memory_id] = 0.0
        return self._seen[memory_id]


def decayed_strength(strength: float, since: float, now: float, half_life_days: float) -> float:
    """`strength × 0.5^(idle days / half-life)`: idle since `since` (the link made, or an end recalled)."""
    idle = max(0.0, (now - since) / DAY)
    return strength * 0.5 ** (idle / half_life_days) if half_life_days > 0 else strength


class LinkAges:
    """Decayed link strengths of one store, for one read (see the module docstring)."""

    def __init__(self, store: Store, index: Any, now: float) -> None:
        self.store, self.index, self.now = store, index, now
        self.half_life = float(store.config().get("graph.link_half_life_days"))
        self.rel_of = index.rel_of_id()
        self.reads = LastReads(store)  # read on the first link weighed: most recalls weigh none

    def made(self, a: str, rel: str, b: str) -> float:
        """When the link between `a` and `b` was made: its `created`, else its memory's; 0 when unknown."""
        for owner, other in ((a, b), (b, a)):
            path = self.rel_of.get(owner)
            if path is None:
                continue
            made = self._made_by(path).get((rel, other))
            if made is not None:
                return made
        return 0.0

    def _made_by(self, path: str) -> dict[tuple[str, str], float]:
        """(relation, other id) -> when each link of the memory at `path` was made; decoded once per sync."""
        made: dict[str, dict[tuple[str, str], float]] = self.index.memo(("links-made",), dict)
        found = made.get(path)
        if found is None:
            meta = self.index.manifest.meta(path)
            found = made[path] = {}
            for link in meta.get("links", ()):
                key = (str(link.get("rel")), str(link.get("to")))
                if key not in found:  # the first such link, as written
                    try:
                        found[key] = epoch(str(link.get("created") or meta.get("created") or ""))
                    except ValueError:
                        found[key] = 0.0
        return found

    def strength(self, a: str, rel: str, b: str, strength: float | None) -> float | None:
        """The link's strength now (a link without one, such as `source_of`, does not decay)."""
        if strength is None:
            return None
        since = max(self.made(a, rel, b), self.reads(a), self.reads(b))
        return decayed_strength(float(strength), since, self.now, self.half_life)


def expand(start: str, neighbours: dict[str, list[tuple[str, str, float | None]]], keep: Callable[[str], bool],
           strength: Callable[[str, str, str, float | None], float | None], seen: set[str],
           strong: float = STRONG_LINK, hops: int = 2) -> list[tuple[str, str, str, float]]:
    """Memories reached from `start`, depth first: (id, relation, reached from, factor). One hop along
    `source_of` (factor 1), up to `hops` along `relates_to` links at least `strong` after decay (the factors,
    their strengths, multiplying). `seen` (updated) holds ids already shown; `keep` says which may be."""
    out: list[tuple[str, str, str, float]] = []
    seen.add(start)

    def step(node: str, factor: float, depth: int) -> None:
        weighed = []
        for rel, to, raw in neighbours.get(node, ()):
            if rel == "source_of":
                weighed.append((1.0, rel, to))
            elif rel == "relates_to" and raw is not None and raw >= strong:  # decay only weakens a link
                now = strength(node, rel, to, raw)
                if now is not None and now >= strong:
                    weighed.append((now, rel, to))
        for weight, rel, to in sorted(weighed, key=lambda w: (-w[0], w[1], w[2])):
            if to in seen or not keep(to):
                continue
            seen.add(to)
            out.append((to, rel, node, factor * weight))
            if rel == "relates_to" and depth < hops:
                step(to, factor * weight, depth + 1)

    step(start, 1.0, 1)
    return out


def flagged(store: Store) -> list[tuple[str, str, float]]:
    return [(str(a), str(b), float(s)) for a, b, s in _state_list(store, "flagged.json") if isinstance(a, str)]


def flag(store: Store, pairs: list[tuple[str, str, float]]) -> None:
    """Remember near-duplicate pairs for the next consolidation (state/, never committed)."""
    with file_lock(store.state_dir / "flagged.lock"):
        known = {tuple(sorted((a, b))): s for a, b, s in [*flagged(store), *pairs]}
        _save_state(store, "flagged.json", [[a, b, s] for (a, b), s in sorted(known.items())])


def _unflag(store: Store, drop: Callable[[str, str], bool]) -> None:
    with file_lock(store.state_dir / "flagged.lock"):
        _save_state(store, "flagged.json", [[a, b, s] for a, b, s in flagged(store) if not drop(a, b)])


def clear_flags(store: Store, ids: Iterable[str]) -> None:
    """Forget every flagged pair holding one of these memories (merged or gone)."""
    gone = set(ids)
    _unflag(store, lambda a, b: a in gone or b in gone)


def clear_flagged_pairs(store: Store, pairs: Iterable[tuple[str, str]]) -> None:
    """Forget these flagged pairs (judged by a consolidation run); pairs flagged since stay."""
    judged = {tuple(sorted(pair)) for pair in pairs}
    _unflag(store, lambda a, b: tuple(sorted((a, b))) in judged)


# Capture queues the ids it wrote (`state/maintain.json`); the detached `cortex maintain` links them.


def queue_links(store: Store, ids: Iterable[str]) -> None:
    """Queue memories to be linked by the next `cortex maintain`."""
    ids = [i for i in ids if i]
    if not ids:
        return
    with file_lock(store.state_dir / "maintain.lock"):
        pending = queued_links(store)
        _save_state(store, "maintain.json", pending + [i for i in dict.fromkeys(ids) if i not in pending])


def queued_links(store: Store) -> list[str]:
    return [str(i) for i in _state_list(store, "maintain.json")]


def unqueue_links(store: Store, done: Iterable[str]) -> None:
    """Drop linked ids from the queue (only once linked: a run killed before keeps its queue)."""
    gone = set(done)
    with file_lock(store.state_dir / "maintain.lock"):
        _save_state(store, "maintain.json", [i for i in queued_links(store) if i not in gone])


def connect_quietly(store: Store, ids: Iterable[str], index: Any = None) -> LinkReport | None:
    """`connect` for hooks and writers that must not fail because linking did: logs instead."""
    ids = list(ids)
    try:
        return connect(store, ids, index)
    except Exception as exc:  # linking is a bonus; the memory is already written
        store.log(f"graph: linking {list(ids)} failed: {exc!r}")
        return None
