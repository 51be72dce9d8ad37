"""Hybrid recall: BM25F + semantic, fused by reciprocal rank, blended with a ranking prior.

Per store (project first, then global): BM25F (weak hits under `recall.bm25_floor` of the best dropped) and
cosine lists fused (`score_fusion` with the contextual model), plus `recall.prior_weight` times the prior,
then up to two hops along strong links (`graph.expand`). With no model the caller is told once and gets
BM25 alone. docs/recall.md.
"""

from __future__ import annotations

import datetime
import heapq
import math
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Iterable

from cortex import salience
from cortex.memory import Memory, now_epoch
from cortex.store import Store

POOL = 50
# A query whose most specific word is in half of 20+ memories is narrowed to the best 3 (unless a limit was asked).
BROAD_SHARE, BROAD_MIN, NARROWED = 0.5, 20, 3
NARROWED_NOTE = f"showing the best {NARROWED}"  # in the note a narrowed answer carries
RELEVANT_MATCH = 0.2  # under this match a memory does not bear on the question (docs/recall.md, "The relevance line")
# A question's specific words (in at most SPECIFIC_SHARE of the memories) name what it asks about: a memory linked
# to a hit comes with it only when it holds NAMED_SHARE of them (by rarity) (docs/recall.md, "Linked hits").
SPECIFIC_SHARE, NAMED_SHARE = 0.03, 0.7
# A query word in more of the memories than this share and number does not pick the sentence a hit shows.
COMMON_SHARE, COMMON_MIN = 0.05, 10
RELEVANT_POOL = 10  # hits a recall judges at least, so that a small limit still finds a relevant one ranked past it
MATCH_SPREAD = 0.25  # the prompt hook injects only hits within this much of the best match (0..1)
# A hit holding HELD_SHARE of the question's words (by rarity) is relevant from a match of SUPPORTED_MATCH, when the
# line is higher: the words and the meaning agree. A word no memory holds weighs UNHELD_WEIGHT of the rarest one's
# (a paraphrase's word or a name never written); only the first QUESTION_TERMS words are weighed (docs/recall.md).
HELD_SHARE, SUPPORTED_MATCH, UNHELD_WEIGHT, QUESTION_TERMS = 0.2, 0.3, 0.5, 64
LIST_WEIGHTS = {"bm25": 1.0, "dense": 0.5, "ctx": 1.0}  # default of recall.list_weights (bench/retrieval.py)
FUSION = {"bm25": 0.7, "ctx": 1.0, "dense": 0.5}  # `score_fusion`'s weights (bench/devset.py)
WORD_SUPPORT = 0.35  # a full-text score counts fully from this match up, less below it (any shared word won before)
CTX_LOW, CTX_HIGH = 0.15, 0.65  # contextual cosines: unrelated texts under LOW, most answers over HIGH
STATIC_LOW, STATIC_HIGH = 0.3, 0.8  # the static model's cosines are flatter
STATIC_SHARE = 0.5  # the static model's weight in `match_score`, beside the contextual one's 1
CODE_DAMPING = 0.7  # a code outline's relevance is scaled by this unless the question is about code
SESSION_LIFT = 0.25  # share of the best hit's relevance its capture session gains: an answer's other half
STRONG_LINK = 0.4


@dataclass
class Hit:
    memory: Memory
    score: float
    store: str
    snippet: str = ""
    via: str | None = None
    raw: dict[str, float] = field(default_factory=dict)  # each list's own score (BM25, cosine)
    match: float | None = None  # calibrated 0..1: how well the memory answers the query (None: keyword only)
    root: str | None = None  # a linked hit: the id of the direct hit it was reached from (one or two hops)
    relevant: bool | None = None  # by the one relevance rule (`mark_relevant`); None: not judged (no contextual match)
    spans: list[tuple[int, int]] = field(default_factory=list)  # the query's words in `snippet`
    stale: str | None = None  # why later commits may have made it stale (`cortex.staleness.mark`)
    named: float | None = None  # the share of the query's specific words it holds (`weigh_words`); None: no such word
    held: float | None = None  # the share of the query's words it holds, by rarity (`weigh_words`); None: not weighed

    def to_dict(self) -> dict[str, Any]:
        m = self.memory
        return {
            "id": m.id,
            "title": m.title,
            "type": m.type,
            "status": m.status,
            "proposed": m.status == "proposed",
            "score": round(self.score, 6),
            "match": None if self.match is None else round(self.match, 3),
            "path": str(m.path),
            "store": self.store,
            "snippet": self.snippet,
            "highlights": [list(span) for span in self.spans],
            "summary": m.one_line(),
            "project": m.project,
            "branch": m.branch,
            "tags": m.tags,
            "via": self.via,
            "relevant": self.relevant,
            "stale": self.stale,
        }


@dataclass
class RecallResult:
    hits: list[Hit]
    notes: list[str] = field(default_factory=list)
    excluded_match: float | None = None  # the best match among the `exclude`d memories ranked ahead of the cut
    unwritten: list[str] | None = None  # names in the query no memory searched holds (`weigh_words`); None: not weighed


PRIOR_TERMS = ("confidence", "priority", "centrality", "access", "same_branch", "salience")


class Prior:
    """The ranking prior (DESIGN.md §3) of one query or briefing, in 0..1: `recall.weights` over its terms, plus
    `salience.weight` × (salience − 0.5), both divided by the sum of the weights."""

    def __init__(self, store: Store, index: Any, now: float, branch: str | None,
                 central: dict[str, float] | None = None, local: bool = True) -> None:
        """`local=False`: no reads or salience (this clone's own signals), for what is written to a tracked file."""
        self.weights = {name: float(value) for name, value in store.config().get("recall.weights").items()}
        self.total = sum(self.weights.values()) or 1.0
        self.access = store.access_counts() if local else {}
        self.max_log = math.log(max(self.access.values(), default=0) + 1) or 1.0
        self.central = central if central is not None else index.centralities()
        self.now, self.branch = now, branch
        self.salience = salience.scores(store) if local else {}
        self.salience_weight = float(store.config().get("salience.weight"))

    def __call__(self, memory: Memory) -> float:
        return sum(self._terms(memory))

    def bound(self) -> float:
        """The most this prior can give any memory; infinite when a weight is negative (nothing can be bounded)."""
        if self.total <= 0 or any(value < 0 for value in self.weights.values()):
            return math.inf
        return (sum(self.weights.values()) + 0.5 * abs(self.salience_weight)) / self.total

    def parts(self, memory: Memory) -> dict[str, float]:
        """Each term of the prior (weight × value / sum of weights); `cortex show` prints them."""
        return dict(zip(PRIOR_TERMS, self._terms(memory)))

    def _terms(self, memory: Memory) -> tuple[float, ...]:
        """The terms in `PRIOR_TERMS` order."""
        from cortex.lifecycle import decayed_confidence

        w, reads, central = self.weights, self.access.get(memory.id, 0), self.central.get(memory.id, 0.0)
        return (w["confidence"] * decayed_confidence(memory, self.now, reads, central) / self.total,
                w["priority"] * memory.priority / 10 / self.total,
                w["centrality"] * central / self.total,
                w["access"] * math.log(reads + 1) / self.max_log / self.total,
                w["same_branch"] * (self.branch is not None and memory.branch == self.branch) / self.total,
                self.salience_weight * (self.salience.get(memory.id, 0.5) - 0.5) / self.total)


# ---------------------------------------------------------------- the contextual model (re-ranking)


class _Contextual:
    """The process's contextual encoder for recall, off until an edge turns it on (`use_contextual`)."""

    def __init__(self) -> None:
        self.mode: str | None = None  # None (off), "inline" (a command) or "background" (a resident process)
        self.encoder: Any = None
        self.problem: str | None = None
        self.sidecars: dict[str, Any] = {}
        self.started: dict[str, float] = {}  # store root -> when this process last started a filler
        self.queries: dict[str, Any] = {}
        self.ahead: Any = None  # the thread of `load_ahead`, until someone waits for it

    def load_ahead(self, text: str) -> None:
        """A command: load the encoder and embed `text` in a thread while this one syncs the store (`get` and
        `query` wait for it)."""
        if self.mode != "inline" or self.problem is not None or self.ahead is not None or text in self.queries:
            return
        import threading

        def work() -> None:
            try:
                encoder = self._load()
                if encoder is not None:
                    self._keep(text, encoder.sentence_vectors([for_transformer(text)], max_tokens=QUERY_TOKENS)[0])
            except Exception:  # the thread that needs it loads or embeds it again, and says what is wrong
                pass

        self.ahead = threading.Thread(target=work, name="cortex-contextual-load", daemon=True)
        self.ahead.start()

    def _wait_ahead(self) -> None:
        ahead, self.ahead = self.ahead, None
        if ahead is not None:
            ahead.join()

    def get(self) -> Any:
        self._wait_ahead()
        return self._load()

    def _load(self) -> Any:
        if self.mode is None or self.problem is not None:
            return None
        if self.encoder is None:
            from cortex.contextual import Encoder
            from cortex.embedding import EncoderUnavailable

            try:
                self.encoder = Encoder()
            except EncoderUnavailable as exc:
                self.problem = str(exc)
                return None
        return self.encoder

    def sidecar(self, store: Store) -> Any:
        from cortex.index.vectors import Contextual

        key = str(store.cache_dir)
        if key not in self.sidecars:
            self.sidecars[key] = Contextual(store.cache_dir)
        return self.sidecars[key]

    def _keep(self, text: str, vector: Any) -> None:
        if len(self.queries) > 64:
            self.queries.clear()
        self.queries[text] = vector

    def query(self, text: str) -> Any:
        """The query's sentence vector (the last few are kept: MCP and the prompt hook repeat queries)."""
        self._wait_ahead()
        vector = self.queries.get(text)
        if vector is None:
            vector = self.get().sentence_vectors([for_transformer(text)], max_tokens=QUERY_TOKENS)[0]
            self._keep(text, vector)
        return vector


CONTEXTUAL = _Contextual()
QUERY_TOKENS = 64  # the transformer embeds a query's opening only: a pasted log should not make a prompt wait
# Words the transformer is not shown in a query: the ranking does not move for them (docs/recall.md).
_UNSHOWN = frozenset("a an the do does did is are was were be been being am have has had can could should would "
                     "will shall may might must i me my we us our you your he she him her his it its they them their "
                     "this that these those there here".split())
_QUERY_WORD = re.compile(r"[\w'-]+|[^\w\s]+")


def for_transformer(text: str) -> str:
    """The query without the words of `_UNSHOWN` ("May" or "US" mid-sentence is a name, kept); the whole text
    when nothing would be left."""
    words = _QUERY_WORD.findall(text)
    kept = [w for n, w in enumerate(words) if w.lower() not in _UNSHOWN or not (w.islower() or n == 0 or w == "I")]
    return " ".join(kept) if any(w[0].isalnum() or w[0] == "_" for w in kept) else text


RESTART_S = 60.0  # a process starts the detached filler for a store at most this often
INLINE_FILL = 32  # `cortex recall` embeds up to this many missing memories itself; a detached upkeep the rest


def use_contextual(mode: str | None = "inline") -> None:
    """Turn contextual re-ranking on for this process: "inline" (a command) or "background" (a resident process)."""
    CONTEXTUAL.mode = mode


def missing_contextual(store: Store, index: Any) -> list[tuple[str, str]]:
    """(text hash, path) of the memories without a contextual vector."""
    encoder = CONTEXTUAL.encoder
    identity = encoder.identity if encoder is not None else None
    loaded = CONTEXTUAL.sidecar(store).load(identity) if identity else None
    have = loaded[1] if loaded is not None else {}
    key = ("missing-contextual", identity, len(have))  # once per sync and sidecar size, not per query
    views = index._allowed  # noqa: SLF001 - the per-sync view cache of the index
    if key not in views:
        wanted: dict[str, str] = {}
        for rel, vhash in index.records().column("vhash"):
            if vhash and vhash not in have and vhash not in wanted:
                wanted[vhash] = rel
        for stale in [k for k in views if isinstance(k, tuple) and k[:1] == ("missing-contextual",)]:
            del views[stale]
        views[key] = list(wanted.items())
    return list(views[key])


def fill_contextual(store: Store, index: Any, limit: int | None = None, batch: int = 128, wait: bool = False) -> int:
    """Embed up to `limit` memories that have no contextual vector yet; returns how many. Skips when another
    filler holds the lock, or with `wait` fills what it left."""
    from cortex.files import try_lock
    from cortex.index.cache import read_body
    from cortex.index.manifest import embed_text, memory_from_meta

    encoder = CONTEXTUAL.get()
    if encoder is None:
        return 0
    sidecar = CONTEXTUAL.sidecar(store)
    done = 0
    store.cache_dir.mkdir(parents=True, exist_ok=True)
    with try_lock(sidecar.lock_path, wait=wait) as locked:
        if not locked:
            return 0
        todo = missing_contextual(store, index)[:limit]
        for start in range(0, len(todo), batch):
            chunk = todo[start:start + batch]
            texts = []
            for _vhash, rel in chunk:
                item = memory_from_meta(index.manifest.meta(rel), store.memories_dir / rel)
                item.body = read_body(store.memories_dir / rel)
                texts.append(embed_text(item))
            sidecar.add(encoder.identity, [vhash for vhash, _ in chunk], encoder.sentence_vectors(texts))
            done += len(chunk)
    return done


def _fill_detached(store: Store) -> None:
    """Hand the missing contextual vectors to a detached `cortex maintain` (niced, on every core), unless a filler
    holds the lock already; this process ranks without them meanwhile."""
    import time

    from cortex.files import try_lock
    from cortex.spawn import detached

    if time.monotonic() - CONTEXTUAL.started.get(str(store.root), -RESTART_S) < RESTART_S:
        return  # a resident process started one a moment ago: it is still syncing before it takes the lock
    try:
        with try_lock(CONTEXTUAL.sidecar(store).lock_path) as free:
            if not free:
                return  # a filler is at work
        detached(["maintain", "--dir", str(store.root)], str(store.state_dir), env={"CORTEX_NESTED": "0"})
        CONTEXTUAL.started[str(store.root)] = time.monotonic()
    except OSError as exc:
        store.log(f"recall: could not start the upkeep to fill contextual vectors: {exc!r}")


def contextual_scores(store: Store, index: Any, query: str, key: Any, allowed: frozenset[str]
                      ) -> Scores | None:
    """Cosine of the query with every allowed memory's contextual vector (None when the model is off or a vector
    is missing). Up to `INLINE_FILL` missing vectors are filled first, more elsewhere."""
    import cortex.index.vectors as vectors

    encoder = CONTEXTUAL.get()
    if encoder is None or not allowed:
        return None
    missing = missing_contextual(store, index)
    if len(missing) > INLINE_FILL:  # more than an answer should wait for
        _fill_detached(store)
    elif missing:  # a filler at work has at most these few left: wait for it
        fill_contextual(store, index, limit=INLINE_FILL, wait=True)
    view = contextual_view(store, index, encoder, key, allowed)
    if view is None:
        return None
    rels, sub, complete, where = view
    if not rels or not complete:
        return None  # some memories have no vector yet: rank them all the same way (rank fusion) until they do
    return Scores(rels, where, vectors.cosines(sub, CONTEXTUAL.query(query)))


def contextual_view(store: Store, index: Any, encoder: Any, key: Any, allowed: frozenset[str]) -> Any:
    """(paths, what `vectors.cosines` multiplies for them, whether every allowed memory has a vector, path ->
    position), once per sync and filter; None without contextual vectors."""
    import cortex.index.vectors as vectors

    sidecar = CONTEXTUAL.sidecar(store)
    loaded = sidecar.load(encoder.identity)
    if loaded is None:
        return None
    matrix, row_of = loaded
    cache_key = ("contextual", key, id(matrix))  # cleared with the index's other views when a sync changes it
    views = index._allowed  # noqa: SLF001 - the per-sync view cache of the index
    if cache_key not in views:
        for stale in [k for k in views if isinstance(k, tuple) and k[:2] == ("contextual", key)]:
            del views[stale]  # rows were appended since: one view per filter, not one per batch
        rels, rows, embeddable = index.embedded(allowed, row_of)
        complete = len(rels) == embeddable
        views[cache_key] = (rels, vectors.rows_view(matrix, rows), complete, {rel: i for i, rel in enumerate(rels)})
    return views[cache_key]


def _matching_share(index: Any, query: str, total: int) -> float:
    """The share of the store's memories holding the query's rarest word (0 for a small store)."""
    searcher = index.searcher() if total >= BROAD_MIN else None
    if searcher is None:
        return 0.0
    from cortex.index import fulltext

    try:
        found = min((searcher.doc_frequency("text", term) for term in fulltext.terms(" ".join(fulltext.query_words(query)))),
                    default=0)
    except Exception:  # a writer replaced the index: no narrowing this time
        return 0.0
    return min(1.0, found / total)  # the full-text index may still count deleted documents


def _snippet(memory: Memory, query: str, common: frozenset[str] = frozenset()) -> str:
    """The part of the body that answers `query` (`render.answering_part`), the one secret rule applied first."""
    from cortex.guard import redacted
    from cortex.index.fulltext import terms
    from cortex.render import answering_part

    return answering_part(redacted(memory.body), query, terms, memory.title, common=common)


def _common_words(index: Any, query: str) -> frozenset[str]:
    """The query's words (as the full-text index reads them) held by more than `COMMON_SHARE` of the store's
    memories and more than `COMMON_MIN` of them: a sentence holding only these does not answer the question."""
    searcher = index.searcher()
    if searcher is None:
        return frozenset()
    from cortex.index import fulltext

    try:
        least = max(COMMON_MIN, COMMON_SHARE * searcher.doc_count_all())
        return frozenset(term for term in fulltext.terms(query) if searcher.doc_frequency("text", term) > least)
    except Exception:  # a writer replaced the index: every word counts this time
        return frozenset()


_CODE_WORDS = frozenset("code coded source function functions method methods class classes module modules file files "
                        "implementation implemented implement defined define definition script scripts signature "
                        "argument arguments parameter parameters returns import imports helper helpers wrapper util "
                        "utils utility utilities decorator endpoint handler".split())
_CODE_TOKEN = re.compile(r"\w+\.(?:py|js|jsx|ts|tsx|go|rs|java|kt|rb|php|c|h|cc|cpp|hpp|cs|swift|sh|sql|md|toml|ya?ml|json)\b"
                         r"|\w+/\w+|\w+\(|\b[a-z]+_[a-z_]+\b|\b[a-z]+[A-Z]\w*")


def about_code(query: str) -> bool:
    """Whether a question is about code: it names a file, a path, a call or an identifier, or asks about code."""
    if _CODE_TOKEN.search(query):
        return True
    return any(word in _CODE_WORDS for word in re.findall(r"[a-z]+", query.lower()))


def score_fusion(ranked: dict[str, list[tuple[str, float]]], raw: dict[str, dict[str, float]],
                 cosines: Mapping[str, float], statics: Mapping[str, float], only: list[str] | None = None,
                 into: dict[str, float] | None = None) -> dict[str, float]:
    """Relevance in 0..1 of every candidate with the contextual model on: a weighted mean (`FUSION`) of its BM25
    score over the best one and its two matches, so a clear answer outranks a shared word. Records each
    candidate's cosines in `raw`. `only`: these candidates alone, added to `into`."""
    bm25 = dict(ranked.get("bm25", []))
    top = max(bm25.values(), default=0.0) or 1.0
    total = sum(FUSION.values())
    w_bm25, w_ctx, w_dense = FUSION["bm25"], FUSION["ctx"], FUSION["dense"]
    out = {} if into is None else into
    rels = list(raw) if only is None else only
    for rel in rels:
        cosine, static_cosine = cosines.get(rel), statics.get(rel)
        scores = raw[rel]
        if cosine is not None:
            scores["ctx"] = cosine
        else:
            cosine = scores.get("ctx")
        if static_cosine is not None:
            scores["dense"] = static_cosine
        else:
            static_cosine = scores.get("dense")
        ctx = 0.0 if cosine is None else _scaled(cosine, CTX_LOW, CTX_HIGH)
        static = 0.0 if static_cosine is None else _scaled(static_cosine, STATIC_LOW, STATIC_HIGH)
        support = min(1.0, (match_score(scores) or 0.0) / WORD_SUPPORT)
        out[rel] = (w_bm25 * support * bm25.get(rel, 0.0) / top + w_ctx * ctx + w_dense * static) / total
    return out


def sessions(index: Any) -> tuple[dict[str, str], dict[str, list[str]]]:
    """Each memory's capture session (by path) and each session's memories, once per sync."""

    def gather() -> tuple[dict[str, str], dict[str, list[str]]]:
        session_of: dict[str, str] = {}
        members: dict[str, list[str]] = {}
        for rel, session in index.records().column("session"):
            if session:
                session_of[rel] = session
                members.setdefault(session, []).append(rel)
        return session_of, members

    return index.memo(("sessions",), gather)  # type: ignore[no-any-return]


def session_lift(index: Any, fused: dict[str, float], ranked: dict[str, list[tuple[str, float]]],
                 raw: dict[str, dict[str, float]], cosines: Mapping[str, float],
                 statics: Mapping[str, float], allowed: frozenset[str]) -> dict[str, float]:
    """Score fusion's relevance with each memory of the best hit's capture session (itself included) lifted by
    `SESSION_LIFT` × its relevance; up to `POOL` of them not yet candidates become ones."""
    if not fused or not SESSION_LIFT:
        return fused
    session_of, members = sessions(index)
    best = min(fused, key=lambda rel: (-fused[rel], rel))
    mates = [rel for rel in members.get(session_of.get(best, ""), []) if rel in allowed]
    if len(mates) < 2:
        return fused
    new = [rel for rel in mates if rel not in raw]
    if new:
        added = heapq.nsmallest(POOL, new, key=lambda r: (-cosines.get(r, 0.0), r))
        for rel in added:
            raw[rel] = {}
        fused = score_fusion(ranked, raw, cosines, statics, only=added, into=fused)
    lift = SESSION_LIFT * fused[best]
    for rel in mates:
        if rel in fused:
            fused[rel] += lift
    return fused


class Scores(Mapping[str, float]):
    """One model's cosine for each allowed memory: the product's array behind a mapping, no dict per query."""

    __slots__ = ("rels", "where", "array")

    def __init__(self, rels: list[str], where: dict[str, int], array: Any) -> None:
        self.rels, self.where, self.array = rels, where, array

    def __getitem__(self, rel: str) -> float:
        return float(self.array[self.where[rel]])

    def __contains__(self, rel: object) -> bool:
        return rel in self.where

    def __iter__(self) -> Iterator[str]:
        return iter(self.rels)

    def __len__(self) -> int:
        return len(self.rels)


def top_scores(scores: Scores, n: int) -> list[tuple[str, float]]:
    """The `n` best (key, score) pairs of a non-empty `Scores`, ties by key."""
    import numpy as np

    keys, values = scores.rels, scores.array
    top = min(n, len(keys))
    threshold = values[np.argpartition(-values, top - 1)[:top]].min()
    chosen = np.flatnonzero(values >= threshold)  # every key tied with the n-th competes on its name
    return sorted(((keys[i], float(values[i])) for i in chosen.tolist()), key=lambda kv: (-kv[1], kv[0]))[:n]


def static_scores(index: Any, query: str, key: Any, allowed: frozenset[str]) -> Scores | None:
    """Static-model cosine of the query with every allowed memory that has a vector (None without vectors)."""
    import numpy as np

    import cortex.index.vectors as vectors

    loaded = index.vector_matrix()
    encoder = index.encoder() if loaded is not None else None
    if encoder is None:
        return None
    matrix, row_of = loaded

    def view() -> tuple[list[str], Any, dict[str, int]]:
        rels, rows, _ = index.embedded(allowed, row_of)
        return rels, vectors.rows_view(matrix, rows), {rel: i for i, rel in enumerate(rels)}

    rels, sub, where = index.memo(("static-all", key), view)
    if not rels:
        return None
    return Scores(rels, where, vectors.cosines(sub, np.asarray(encoder.encode_one(query), dtype=np.float32)))


def match_score(raw: dict[str, float]) -> float | None:
    """How well a memory answers the query, in 0..1 and comparable across queries: each model's cosine scaled
    from its noise level to its answer level, the static one weighted `STATIC_SHARE`; None for full text only."""
    if "ctx" in raw and "dense" in raw:
        return (_scaled(raw["ctx"], CTX_LOW, CTX_HIGH) + STATIC_SHARE * _scaled(raw["dense"], STATIC_LOW, STATIC_HIGH)) \
            / (1 + STATIC_SHARE)
    if "ctx" in raw:
        return _scaled(raw["ctx"], CTX_LOW, CTX_HIGH)
    if "dense" in raw:
        return _scaled(raw["dense"], STATIC_LOW, STATIC_HIGH)
    return None


def _scaled(cos: float, low: float, high: float) -> float:
    """A cosine mapped linearly from `low` (0) to `high` (1), clipped."""
    return min(1.0, max(0.0, (cos - low) / (high - low)))


def fuse(ranked: dict[str, list[tuple[str, float]]], rrf_k: float, weights: dict[str, float] | None = None
         ) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """Relevance in 0..1 for every path in any list (reciprocal rank fusion); each path's raw score in each list."""
    weights = weights or LIST_WEIGHTS
    best_possible = sum(weights[name] for name in ranked) / (rrf_k + 1) or 1.0
    fused: dict[str, float] = {}
    raw: dict[str, dict[str, float]] = {}
    for name, hits in ranked.items():
        for position, (rel, score) in enumerate(hits, start=1):
            raw.setdefault(rel, {})[name] = score
            fused[rel] = fused.get(rel, 0.0) + weights[name] / (rrf_k + position) / best_possible
    return fused, raw


def recall_filter(statuses: tuple[str, ...], types: list[str], branch: str | None
                  ) -> tuple[Any, Callable[[str, str, str | None], bool]]:
    """(the key of `Index.allowed`'s filter, the filter) of the memories a recall searches. Source code is found
    through its description (and comes back right after it, one hop along source_of); it is searched directly
    only when asked for by type."""
    return (statuses, tuple(types), branch), lambda status, kind, on: (
        status in statuses and (kind in types if types else kind != "code") and (branch is None or on == branch))


_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")
_STAMP = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z")


def time_window(since: str | None, until: str | None) -> tuple[str, str] | None:
    """(since, until) as stamps written in files (a bare day counts whole; an open end reaches everything), None
    when neither is given. Raises ValueError naming `since` or `until` when one is not a date."""
    if not since and not until:
        return None
    ends = []
    for name, value, day_part, open_end in (("since", since, "T00:00:00Z", ""), ("until", until, "T23:59:59Z", "9999")):
        if not value:
            ends.append(open_end)
            continue
        stamp = value.strip() + (day_part if _DAY.fullmatch(value.strip()) else "")
        try:
            if not _STAMP.fullmatch(stamp):
                raise ValueError
            datetime.datetime.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S")  # a day of the calendar, not 9999-99-99
        except ValueError:
            raise ValueError(f"{name}: {value!r} is not a date (YYYY-MM-DD or YYYY-MM-DDTHH:MM:SSZ)") from None
        ends.append(stamp)
    return ends[0], ends[1]


def searched_statuses(index: Any, include_all: bool, proposed: bool) -> tuple[str, ...]:
    """The statuses a recall searches: active ones (with `include_all` archived and superseded too) and, with
    `proposed` (`cortex recall`, MCP search: asked, not the prompt hook), capture's proposals when there are any
    (so a store without any searches the views kept for the active ones)."""
    statuses: tuple[str, ...] = ("active", "archived", "superseded") if include_all else ("active",)
    if proposed and index.memo(("any proposed",), lambda: "proposed" in set(index.records().field("status"))):
        statuses += ("proposed",)
    return statuses


def recall_store(store: Store, query: str, *, limit: int = 10, types: Iterable[str] = (), branch: str | None = None,
                 include_all: bool = False, keyword_only: bool = False, now: float | None = None,
                 index: Any = None, sync: bool = True,
                 methods: tuple[str, ...] = ("bm25", "dense", "ctx"), links: bool = True,
                 read: bool = True, exclude: frozenset[str] = frozenset(), narrow: bool = True,
                 proposed: bool = False, window: tuple[str, str] | None = None) -> RecallResult:
    """Recall from one store (the module docstring says how it ranks; `recall` what the options mean).
    `methods` picks the ranked lists to fuse (benchmarks compare each alone)."""
    from cortex.index import Index, fulltext

    now = now_epoch() if now is None else now
    notes: list[str] = []
    config = store.config()
    rrf_k = float(config.get("recall.rrf_k"))
    prior_weight = float(config.get("recall.prior_weight"))
    list_weights = {name: float(value) for name, value in config.get("recall.list_weights").items()}
    bm25_floor = float(config.get("recall.bm25_floor"))
    index = index or Index(store, keyword_only=keyword_only)
    if sync:
        index.sync(full=True)
    elif index.manifest is None:
        index.ensure(full=True)
    statuses = searched_statuses(index, include_all, proposed)
    types = list(types)
    records = index.records()  # rel -> manifest entry of every valid memory
    allowed_key, keep = recall_filter(statuses, types, branch)
    allowed = index.allowed(allowed_key, keep)
    if window is not None:  # stamps as written in files compare as strings
        allowed = frozenset(rel for rel in allowed if window[0] <= (records.value(rel, "created") or "") <= window[1])
        allowed_key = (allowed_key, window)
    ranked: dict[str, list[tuple[str, float]]] = {}
    contextual = not keyword_only and "ctx" in methods and bool(allowed) and config.get("recall.contextual") is not False
    ix = index.fulltext_index() if "bm25" in methods else None
    if ix is not None:
        try:
            # Whoosh filters by type and branch (they can be narrow); the status filter is applied on the pool.
            found = fulltext.search(ix, query, POOL * 2, (), types, branch, searcher=index.searcher())
        except Exception as exc:  # a writer replaced the index under us: answer from the vectors alone
            store.log(f"recall: full-text search failed: {exc!r}")
            found = []
        ranked["bm25"] = [(rel, score) for rel, score in found if rel in allowed][:POOL]
    cosines = statics = None
    share = _matching_share(index, query, len(records)) if narrow and limit > NARROWED else 0.0
    prior = Prior(store, index, now, store.current_branch())
    if contextual:
        cosines = contextual_scores(store, index, query, allowed_key, allowed)
        if cosines is not None:
            ranked["ctx"] = top_scores(cosines, POOL)
        elif CONTEXTUAL.encoder is not None and (waiting := len(missing_contextual(store, index))):
            notes.append(f"partial ranking: {waiting} of the {store.label} store's memories wait for their vectors "
                         f"(being filled in the background); until then nothing is judged below the relevance line")
    if not keyword_only and "dense" in methods and allowed:
        if cosines is not None:  # score fusion wants every candidate's static cosine, not only the top list's
            statics = static_scores(index, query, allowed_key, allowed)
            found_dense = None if statics is None else top_scores(statics, POOL)
        else:
            found_dense = index.dense_search(query, allowed_key, allowed, POOL)
        if found_dense is not None:
            ranked["dense"] = found_dense
    if share >= BROAD_SHARE:
        limit = NARROWED
        notes.append(f"the query {' '.join(query.split())[:60]!r} is broad: its most specific word matches "
                     f"{share:.0%} of the {store.label} store's memories; {NARROWED_NOTE} (--limit shows more): "
                     f"add a more specific word")
    semantic = "dense" in ranked or "ctx" in ranked
    if semantic and cosines is None and ranked.get("bm25"):
        # Fusing: a full-text hit far below the best one is a shared common word, not evidence.
        floor = bm25_floor * ranked["bm25"][0][1]
        ranked["bm25"] = [(rel, score) for rel, score in ranked["bm25"] if score >= floor]
    if not semantic and not keyword_only and "dense" in methods and allowed:
        notes.append(f"semantic search off in the {store.label} store "
                     f"({index.encoder_problem or 'no vectors'}): full-text only")
    fused, raw = fuse(ranked, rrf_k, {**LIST_WEIGHTS, **list_weights})
    if not fused:
        return RecallResult([], notes)
    if cosines is not None:
        fused = score_fusion(ranked, raw, cosines, statics or {})
        fused = session_lift(index, fused, ranked, raw, cosines, statics or {}, allowed)
    hits, excluded_match = _best_hits(store, index, query, fused, raw, prior, prior_weight, limit, exclude)
    if read:  # the direct hits: what is judged; a linked hit is read once it is kept (`recall`), else `read_hits`
        _read(store, index, hits, query)
    out = _with_links(store, index, hits, statuses, now) if links else hits
    unwritten = weigh_words(index, query, out)
    return RecallResult(out, notes, excluded_match, unwritten)


_NAME = re.compile(r"\w+(?:[.'/-]\w+)*")
_SENTENCE_END = re.compile(r"(?:^|[.!?:;\n])[\s\"'(\[*_`>-]*$")


# Capitalised but not the name of a subject: a date says when (a memory's date is not in its text), a title whom.
_NOT_NAMES = frozenset("january february march april may june july august september october november december jan feb "
                       "mar apr jun jul aug sep sept oct nov dec monday tuesday wednesday thursday friday saturday "
                       "sunday mon tue wed thu fri sat sun dr mr mrs ms".split())


def question_names(query: str) -> list[str]:
    """The names a question gives in its opening: a word capitalised inside a sentence ("Windows", "GitHub") and
    an acronym ("CDN", "REST"), anywhere. What a sentence starts with, "I", months, days, titles, paths and
    snake_case (code, not a subject) are not names."""
    names = []
    for found in _NAME.finditer(query[:MAX_NAMES_CHARS]):
        word = found.group().split("'")[0]
        if len(word) < 2 or not word[0].isupper() or word.lower() in _NOT_NAMES or "/" in word or "_" in word:
            continue
        if word.isupper() or not _SENTENCE_END.search(query[max(0, found.start() - 8):found.start()]):
            names.append(word)
    return names


MAX_NAMES_CHARS = 400  # a question's names are read from its opening (what follows may be a pasted log or code)


def weigh_words(index: Any, query: str, hits: list[Hit]) -> list[str] | None:
    """Set each hit's `held` (the share of the query's words it holds, each weighed by its rarity `1 + log(N/df)`,
    a word no memory holds by `UNHELD_WEIGHT` of the rarest's) and `named` (the share of its specific words, in at
    most `SPECIFIC_SHARE` of the memories, what names its subject). Returns the names (`question_names`) of a
    query of at most `QUESTION_TERMS` words that no memory holds, when they are at least half of its names: it
    asks about something this store never wrote (None when the store has no full-text index to say)."""
    searcher = index.searcher()
    if searcher is None:
        return None
    from cortex.index import fulltext

    try:
        total = searcher.doc_count_all() or 1
        words = list(dict.fromkeys(fulltext.terms(query)))
        # A question names what it asks about; a long prompt (a pasted log, code) names everything it quotes.
        asked = question_names(query) if len(words) <= QUESTION_TERMS else []
        names = {terms[0]: name for name in asked if (terms := fulltext.terms(name))}
        unheld = [name for term, name in names.items() if not searcher.doc_frequency("text", term)]
        unwritten = unheld if unheld and 2 * len(unheld) >= len(names) else []
        if not hits:
            return unwritten
        found = {term: searcher.doc_frequency("text", term) for term in words[:QUESTION_TERMS]}
        rarest = math.log(total) + 1
        weights = {term: math.log(total / n) + 1 if n else UNHELD_WEIGHT * rarest for term, n in found.items()}
        specific = {term: weights[term] for term, n in found.items() if 0 < n <= max(1, SPECIFIC_SHARE * total)}
        number = {id(hit): searcher.document_number(path=_rel(index, hit)) for hit in hits}
        docs = sorted({doc for doc in number.values() if doc is not None})
        held: dict[int, set[str]] = {doc: set() for doc in docs}
        for term in (term for term, n in found.items() if n):
            postings = searcher.postings("text", term)
            for doc in docs:  # ascending: one pass along the posting list
                if not postings.is_active():
                    break
                if postings.id() < doc:
                    postings.skip_to(doc)
                if postings.is_active() and postings.id() == doc:
                    held[doc].add(term)
    except Exception as exc:  # a writer replaced the index: judged on the match alone this time
        index.store.log(f"recall: the query's words not weighed: {exc!r}")
        return None
    whole, named_whole = sum(weights.values()) or 1.0, sum(specific.values())
    for hit in hits:
        doc = number[id(hit)]
        if doc is None:  # not in the full-text index yet: judged on the match alone
            continue
        hit.held = sum(weights[term] for term in held[doc]) / whole
        if named_whole:
            hit.named = sum(specific[term] for term in held[doc] if term in specific) / named_whole
    return unwritten


def _rel(index: Any, hit: Hit) -> str:
    assert hit.memory.path is not None
    return hit.memory.path.relative_to(index.store.memories_dir).as_posix()


def _best_hits(store: Store, index: Any, query: str, fused: dict[str, float], raw: dict[str, dict[str, float]],
               prior: Prior, prior_weight: float, limit: int, exclude: frozenset[str]
               ) -> tuple[list[Hit], float | None]:
    """The `limit` best hits by relevance plus prior (a code outline damped unless the question is about code),
    and the best match among the `exclude`d memories ranked ahead of the cut."""
    code_question = about_code(query)
    scored: list[Hit] = []
    # Best relevance first, until one the prior cannot lift past the `limit`-th score so far: nor can any after it.
    reach = prior_weight * prior.bound() if prior_weight >= 0 else math.inf
    best: list[float] = []  # min-heap of the `limit` best scores so far
    excluded_match: float | None = None
    for rel, value in sorted(fused.items(), key=lambda kv: (-kv[1], kv[0])):
        if limit <= 0 or (len(best) >= limit and value + reach < best[0]):
            break
        m = index.memory(rel)
        if m.id in exclude:
            if "ctx" in raw.get(rel, {}):
                match = match_score(raw[rel])
                if match is not None and (excluded_match is None or match > excluded_match):
                    excluded_match = match
            continue
        if m.type == "code_description" and not code_question:
            value *= CODE_DAMPING  # an outline of code ranks below knowledge unless the question is about code
        hit = Hit(m, value + prior_weight * prior(m), store.label, raw=raw.get(rel, {}))
        # Judged on the contextual match alone: a static cosine cannot tell an answer from a near-miss.
        hit.match = match_score(hit.raw) if "ctx" in hit.raw else None
        scored.append(hit)
        if len(best) < limit:
            heapq.heappush(best, hit.score)
        elif hit.score > best[0]:
            heapq.heapreplace(best, hit.score)
    scored.sort(key=lambda h: (-h.score, h.memory.id))
    return scored[:limit], excluded_match


def _read(store: Store, index: Any, hits: list[Hit], query: str) -> None:
    """Each hit's memory read in full (its body), with its snippet and the query's words marked in it."""
    from cortex.render import match_spans

    root = store.memories_dir
    common = _common_words(index, query) if hits else frozenset()
    for hit in hits:
        try:
            assert hit.memory.path is not None
            hit.memory = index.read(hit.memory.path.relative_to(root).as_posix())
        except Exception:
            continue
        hit.snippet = _snippet(hit.memory, query, common)
        hit.spans = match_spans(hit.snippet, query)


def read_hits(stores: list[Store], hits: list[Hit], query: str, indexes: Any) -> None:
    """What `recall(..., read=False)` left out, for these hits only: each read in full, snippet and marks."""
    for store in stores:
        mine = [hit for hit in hits if hit.store == store.label]
        if mine:
            _read(store, indexes.synced(store, full=True), mine, query)


def _with_links(store: Store, index: Any, hits: list[Hit], statuses: tuple[str, ...], now: float) -> list[Hit]:
    """`hits` with, after each, what `graph.expand` reaches from it; hops ignore the type and branch filters (code
    comes back with its description)."""
    from cortex.graph import LinkAges, expand

    records, rel_of_id = index.records(), index.rel_of_id()
    neighbours, ages = index.hops(STRONG_LINK), LinkAges(store, index, now)
    shown = {h.memory.id for h in hits}
    out: list[Hit] = []
    for hit in hits:
        out.append(hit)
        for to, rel, via, factor in expand(hit.memory.id, neighbours, lambda i: i in rel_of_id and records.value(
                rel_of_id[i], "status") in statuses, ages.strength, shown, STRONG_LINK):
            linked = index.memory(rel_of_id[to])
            out.append(Hit(linked, hit.score * factor * 0.99, store.label, via=f"{rel} of {via}", root=hit.memory.id))
    return out


def embed_ahead(stores: list[Store], query: str) -> None:
    """Start embedding `query` with the contextual model in a thread if a store ranks by it (`load_ahead`)."""
    if CONTEXTUAL.mode is None or not any(store.config().get("recall.contextual") is not False for store in stores):
        return
    CONTEXTUAL.load_ahead(query)


def recall(stores: list[Store], query: str, *, limit: int = 10, types: Iterable[str] = (), branch: str | None = None,
           include_all: bool = False, keyword_only: bool = False, now: float | None = None,
           indexes: Any = None, links: bool = True, read: bool = True,
           exclude: frozenset[str] = frozenset(), narrow: bool = True, count: bool = True,
           proposed: bool = False, window: tuple[str, str] | None = None) -> RecallResult:
    """Recall across stores (project first): at most `limit` hits, each linked one (`via`) right after its parent.

    `include_all`: archived and superseded too. `indexes`: the process's warm indexes (`cortex.index.Indexes`).
    `links=False`: direct hits only. `read=False`: no body or snippet until `read_hits`. `exclude`: ids that are
    not hits and not counted in `limit` (what the briefing showed). `narrow=False`: a broad query keeps its
    `limit`. `count`: the relevant hits (`mark_relevant`) are counted as read. `proposed`: capture's proposals
    are hits too. `window`: only memories created within (since, until), stamps as written in files."""
    from cortex.errors import QueryRefused
    from cortex.index import Indexes
    from cortex.text import query_problem

    problem = query_problem(query)
    if problem:
        raise QueryRefused(problem)
    if not keyword_only:
        embed_ahead(stores, query)
    indexes = indexes or Indexes()
    hits: list[Hit] = []
    notes: list[str] = []
    excluded_match: float | None = None
    unwritten: list[str] | None = None  # the query's names no store holds
    for store in stores:
        result = recall_store(store, query, limit=max(limit, RELEVANT_POOL), types=types, branch=branch,
                              include_all=include_all, keyword_only=keyword_only, now=now,
                              index=indexes.synced(store, full=True), sync=False, links=links, read=read,
                              exclude=exclude, narrow=narrow, proposed=proposed, window=window)
        hits.extend(h for h in result.hits if window is None or window[0] <= (h.memory.created or "") <= window[1])
        if result.excluded_match is not None:
            excluded_match = max(result.excluded_match, excluded_match or 0.0)
        if result.unwritten is not None:  # a store that cannot say leaves the others' answer
            unwritten = result.unwritten if unwritten is None else [n for n in unwritten if n in result.unwritten]
        for note in result.notes:
            if note not in notes:
                notes.append(note)
    # `limit` bounds linked hits too: one may take a weaker direct hit's place, never without its parent.
    order = {store.label: i for i, store in enumerate(stores)}

    unwritten = unwritten or []
    mark_relevant(hits, query=query, unwritten=unwritten)  # relevant first: a small limit is not filled from below

    def rank(h: Hit) -> tuple[bool, float, int, bool, str]:
        return h.relevant is False, -round(h.score, 9), order.get(h.store, 9), h.via is not None, h.memory.id

    direct = sorted((h for h in hits if h.via is None), key=rank)[:limit]
    parents = {(h.store, h.memory.id) for h in direct}
    linked = [h for h in hits if h.via is not None and (h.store, h.root) in parents
              and (h.store, h.memory.id) not in parents]
    chosen = {id(h) for h in sorted(direct + linked, key=rank)[:limit]}
    final: list[Hit] = []
    for parent in direct:
        if id(parent) in chosen:
            final.append(parent)
            final.extend(h for h in linked if id(h) in chosen and h.store == parent.store
                         and h.via is not None and h.root == parent.memory.id)
    if read:
        read_hits(stores, [h for h in final if h.via is not None], query, indexes)
        final = newer_first(final, lambda label: next(
            (indexes.synced(store, full=True).searcher() for store in stores if store.label == label), None))
    if count:
        count_reads(stores, final)
    return RecallResult(final, notes, excluded_match, unwritten)


def newer_first(hits: list[Hit], searchers: Callable[[str], Any]) -> list[Hit]:
    """`hits` with a memory placed before an older one of its store and type that it contradicts on one subject
    (what `cortex suspects` raises: the newer one may be what re-decided it), its linked hits with it; else in order.
    `searchers`: a store's label -> its full-text searcher (the words' rarity)."""
    from cortex.claims import contradiction

    blocks: list[list[Hit]] = []
    for hit in hits:
        if hit.via is None or not blocks:
            blocks.append([hit])
        else:
            blocks[-1].append(hit)
    moved = False
    for j in range(1, len(blocks)):
        newer = blocks[j][0]
        for i in range(j):
            older = blocks[i][0]
            if (older.store == newer.store and older.memory.type == newer.memory.type
                    and (newer.memory.created or "") > (older.memory.created or "")
                    and _one_subject(searchers(older.store), older.memory.title, newer.memory.title)
                    and contradiction(_claim_text(older.memory), _claim_text(newer.memory))):
                blocks.insert(i, blocks.pop(j))
                moved = True
                break
    return [hit for block in blocks for hit in block] if moved else hits


def _claim_text(memory: Memory) -> str:
    from cortex.index.manifest import embed_text
    from cortex.suspects import TEXT_MOST

    return embed_text(memory)[:TEXT_MOST]


def _one_subject(searcher: Any, one: str, two: str) -> bool:
    """Whether two titles name one subject: they share at least `suspects.SHARED` of the smaller title's words,
    each weighed by its rarity in the store (as `cortex suspects` pairs memories)."""
    from cortex.index import fulltext
    from cortex.suspects import SHARED

    a, b = set(fulltext.terms(one)), set(fulltext.terms(two))
    if searcher is None or not a & b:
        return False
    try:
        total = searcher.doc_count_all() or 1
        weight = {word: math.log(1 + total / max(1, searcher.doc_frequency("text", word))) for word in a | b}
    except Exception:  # a writer replaced the index: left in order this time
        return False
    return sum(weight[w] for w in a & b) >= SHARED * min(sum(weight[w] for w in a), sum(weight[w] for w in b))


def mark_relevant(hits: list[Hit], min_match: float = RELEVANT_MATCH, spread: float | None = None,
                  shown_match: float | None = None, query: str = "", unwritten: Iterable[str] = ()) -> None:
    """The one relevance rule, for every caller, served or not (docs/recall.md, "The relevance line"): a direct
    hit is relevant when its match is at least `min_match` (at most `SUPPORTED_MATCH` when the hit holds
    `HELD_SHARE` of the query's words) and, with `spread` (the prompt hook), within `spread` of the best match or
    of `shown_match`. Asked (no `spread`), a hit holding every content word of `query` is relevant too. Nothing is
    relevant when the query's names are `unwritten` (`weigh_words`). A linked hit is relevant when its parent is;
    a hit without a match is not judged (None)."""
    matches = [h.match for h in hits if h.via is None and h.match is not None]
    if not matches:
        for hit in hits:
            hit.relevant = None
        return
    best = max(matches + ([shown_match] if shown_match is not None else []))
    near = -1.0 if spread is None else best - spread
    judged: dict[tuple[str, str], bool | None] = {}
    asked = _stems(query) if spread is None else set()
    for hit in hits:
        if hit.via is None:
            if hit.match is None:
                hit.relevant = None
            else:
                supported = hit.held is not None and hit.held >= HELD_SHARE
                line = min(min_match, SUPPORTED_MATCH) if supported else min_match
                hit.relevant = not unwritten and hit.match >= max(line, near)
                if hit.relevant is False and asked and not unwritten and _has_words(hit.memory, asked):
                    hit.relevant = True
            judged[(hit.store, hit.memory.id)] = hit.relevant
    for hit in hits:
        if hit.via is not None:  # with its parent; an associated memory only if it holds what the question names
            hit.relevant = judged.get((hit.store, hit.root or ""), False)
            if hit.relevant and hit.via.startswith("relates_to") and hit.named is not None and hit.named < NAMED_SHARE:
                hit.relevant = False


def _stems(text: str) -> set[str]:
    """Content words, a plural's `s` off, for `_has_words`."""
    from cortex.text import words

    return {re.sub(r"(?<=[a-z]{2}[^s])s$", "", word) for word in words(text)}


def _has_words(memory: Memory, stems: set[str]) -> bool:
    """Whether the memory's title, tags and body hold a word of each stem."""
    text = " ".join((memory.title, " ".join(memory.tags), memory.body))
    return stems <= _stems(text)


def count_reads(stores: list[Store], hits: Iterable[Hit]) -> None:
    """Count as read the hits that are relevant or not judged: a hit below the line was not what was asked."""
    read = [h for h in hits if h.relevant is not False]
    for store in stores:
        store.record_access(h.memory.id for h in read if h.store == store.label)
