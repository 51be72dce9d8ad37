"""Hybrid recall: BM25F + semantic, fused by reciprocal rank, blended with a ranking prior.

For each store (project first, then global):

1. BM25F over title (×3), tags (×2) and body (Whoosh), and cosine over the
   static embeddings; each gives a ranked list of up to `POOL` memories.
   BM25 hits scoring under `recall.bm25_floor` (0.5) of the best hit are
   dropped: a memory sharing one common word with the question is noise.
2. Weighted reciprocal-rank fusion: `rrf = Σ w_list / (k + rank)`, with
   k = `recall.rrf_k` (60) and `recall.list_weights` bm25 1.0, dense 0.5
   (the bundled static model is the weaker ranker: on LoCoMo 0.49 recall@10
   against BM25's 0.62). Divided by its best possible value (rank 1 in both
   lists) it becomes `relevance` in 0..1.
3. The prior (DESIGN.md §3), with weights from `recall.weights`:
   `0.5·confidence(decayed) + 0.2·priority/10 + 0.15·centrality
   + 0.15·log(access+1)/max_log + 0.1·same_branch`, divided by the sum of
   the weights so it is 0..1 too.
4. `score = relevance + recall.prior_weight (0.1) · prior`: relevance leads;
   the prior settles near-ties and lifts a trusted memory a few places.
5. One hop: a hit's `source_of` targets (code behind a description) and its
   strong `relates_to` links (strength ≥ 0.4) come back right after it,
   marked `via`, scored just under it (× the link's strength). Code
   memories are not searched directly (unless `types` names `code`): they
   come back this way, behind their description. `limit` counts these
   too: a linked hit may take the place of a weaker direct one.

With no model (or `keyword_only`) step 1 is BM25 alone and the caller is
told once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable

from cortex.memory import Memory, now_epoch
from cortex.store import Store

POOL = 50
# Default of recall.list_weights (and recall.bm25_floor, 0.5), chosen on LoCoMo conversations 0-4
# (bench/retrieval.py) and the example store's paraphrase queries: see docs/benchmarks.md.
LIST_WEIGHTS = {"bm25": 1.0, "dense": 0.5}
STRONG_LINK = 0.4


@dataclass
class Hit:
    memory: Memory
    score: float
    store: str
    snippet: str = ""
    via: str | None = None
    ranks: dict[str, int] = field(default_factory=dict)
    raw: dict[str, float] = field(default_factory=dict)  # each list's own score (BM25, cosine)

    def to_dict(self) -> dict[str, Any]:
        m = self.memory
        return {
            "id": m.id,
            "title": m.title,
            "type": m.type,
            "status": m.status,
            "score": round(self.score, 6),
            "path": str(m.path),
            "store": self.store,
            "snippet": self.snippet,
            "branch": m.branch,
            "tags": m.tags,
            "via": self.via,
        }


@dataclass
class RecallResult:
    hits: list[Hit]
    notes: list[str] = field(default_factory=list)


class Prior:
    """The ranking prior (DESIGN.md §3) of one query or briefing, in 0..1: `recall.weights` over decayed
    confidence, priority, centrality, reads and the current branch, divided by the sum of the weights."""

    def __init__(self, store: Store, index: Any, now: float, branch: str | None) -> None:
        self.weights = {name: float(value) for name, value in store.config().get("recall.weights").items()}
        self.total = sum(self.weights.values()) or 1.0
        self.access = store.access_counts()
        self.max_log = math.log(max(self.access.values(), default=0) + 1) or 1.0
        self.central = index.centralities()
        self.now, self.branch = now, branch

    def __call__(self, memory: Memory) -> float:
        from cortex.lifecycle import decayed_confidence

        w, reads, central = self.weights, self.access.get(memory.id, 0), self.central.get(memory.id, 0.0)
        return (w["confidence"] * decayed_confidence(memory, self.now, reads, central)
                + w["priority"] * memory.priority / 10
                + w["centrality"] * central
                + w["access"] * math.log(reads + 1) / self.max_log
                + w["same_branch"] * (1.0 if self.branch is not None and memory.branch == self.branch else 0.0)
                ) / self.total


def _snippet(memory: Memory, words: list[str], width: int = 160) -> str:
    body = " ".join(memory.body.split())
    if not body:
        return ""
    lower = body.lower()
    at = min((lower.find(w) for w in words if lower.find(w) >= 0), default=0)
    start = max(0, at - width // 4)
    text = body[start : start + width]
    return ("…" if start else "") + text + ("…" if start + width < len(body) else "")


def fuse(ranked: dict[str, list[tuple[str, float]]], rrf_k: float, weights: dict[str, float] | None = None
         ) -> tuple[dict[str, float], dict[str, dict[str, int]], dict[str, dict[str, float]]]:
    """Relevance in 0..1 for every path in any list; each path's rank and raw score in each list."""
    weights = weights or LIST_WEIGHTS
    ranks: dict[str, dict[str, int]] = {}
    raw: dict[str, dict[str, float]] = {}
    for name, hits in ranked.items():
        for position, (rel, score) in enumerate(hits, start=1):
            ranks.setdefault(rel, {})[name] = position
            raw.setdefault(rel, {})[name] = score
    fused: dict[str, float] = {}
    best_possible = sum(weights[name] for name in ranked) / (rrf_k + 1) or 1.0
    for name, hits in ranked.items():
        for position, (rel, _score) in enumerate(hits, start=1):
            fused[rel] = fused.get(rel, 0.0) + weights[name] / (rrf_k + position) / best_possible
    return fused, ranks, raw


def recall_store(store: Store, query: str, *, limit: int = 10, types: Iterable[str] = (), branch: str | None = None,
                 include_all: bool = False, keyword_only: bool = False, now: float | None = None,
                 index: Any = None, sync: bool = True,
                 methods: tuple[str, ...] = ("bm25", "dense")) -> RecallResult:
    """Recall from one store (see the module docstring for the ranking).

    `methods` picks the ranked lists to fuse (benchmarks compare each alone).
    """
    from cortex.index import Index, fulltext
    from cortex.index.manifest import memory_from_meta

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
    statuses = ("active", "archived", "superseded") if include_all else ("active",)
    types = list(types)
    records = index.records()  # rel -> manifest entry of every valid memory
    allowed_key = (statuses, tuple(types), branch)
    # Source code is found through its description (and comes back right after it, one hop along source_of);
    # it is searched directly only when asked for by type.
    allowed = index.allowed(allowed_key, lambda entry: entry["status"] in statuses
                            and (entry["type"] in types if types else entry["type"] != "code")
                            and (branch is None or entry["branch"] == branch))
    ranked: dict[str, list[tuple[str, float]]] = {}
    ix = index.fulltext_index() if "bm25" in methods else None
    if ix is not None:
        try:
            # The status filter is cheaper in Python on a pool (Whoosh would build a 10,000-doc set);
            # type and branch filters can be narrow, so Whoosh applies those.
            found = fulltext.search(ix, query, POOL * 2, (), types, branch, searcher=index.searcher())
        except Exception as exc:  # a writer replaced the index under us: answer from the vectors alone
            store.log(f"recall: full-text search failed: {exc!r}")
            found = []
        ranked["bm25"] = [(rel, score) for rel, score in found if rel in allowed][:POOL]
    if not keyword_only and "dense" in methods and allowed:
        found_dense = index.dense_search(query, allowed_key, allowed, POOL)
        if found_dense is not None:
            ranked["dense"] = found_dense
    if "dense" in ranked and ranked.get("bm25"):
        # Fusing: a full-text hit far below the best one is a shared common word, not evidence.
        floor = bm25_floor * ranked["bm25"][0][1]
        ranked["bm25"] = [(rel, score) for rel, score in ranked["bm25"] if score >= floor]
    if "dense" not in ranked and not keyword_only and "dense" in methods:
        notes.append(f"semantic search off ({index.encoder_problem or 'no vectors'}): full-text only")
    fused, ranks, raw = fuse(ranked, rrf_k, list_weights)
    if not fused:
        return RecallResult([], notes)
    prior = Prior(store, index, now, store.current_branch())
    root = store.memories_dir
    scored = []
    for rel, value in fused.items():
        m = memory_from_meta(index.manifest.meta(rel), root / rel)
        scored.append(Hit(m, value + prior_weight * prior(m), store.label, ranks=ranks[rel], raw=raw.get(rel, {})))
    scored.sort(key=lambda h: (-h.score, h.memory.id))
    hits = scored[:limit]
    # One hop along source_of and strong relates_to links. Hops ignore the type and
    # branch filters: code comes back with its description whatever was asked.
    rel_of_id = index.rel_of_id()
    neighbours = index.neighbours()
    shown = {h.memory.id for h in hits}
    out: list[Hit] = []
    for hit in hits:
        out.append(hit)
        # Its own links and `relates_to` links newer memories made to it (the relation reads both ways).
        links = sorted(neighbours.get(hit.memory.id, ()), key=lambda n: (-(n[2] if n[2] is not None else 1.0), n[0], n[1]))
        for rel, to, strength in links:
            strong = rel == "relates_to" and (strength or 0.0) >= STRONG_LINK
            target = rel_of_id.get(to)
            if (rel == "source_of" or strong) and target and to not in shown and records[target]["status"] in statuses:
                shown.add(to)
                factor = 1.0 if rel == "source_of" else float(strength or 0.0)
                linked = memory_from_meta(index.manifest.meta(target), root / target)
                out.append(Hit(linked, hit.score * factor * 0.99, store.label, via=f"{rel} of {hit.memory.id}"))
    words = fulltext.query_words(query)
    for hit in out:
        try:
            assert hit.memory.path is not None
            hit.memory = store.read(hit.memory.path)
        except Exception:
            continue
        hit.snippet = _snippet(hit.memory, words)
    return RecallResult(out, notes)


def recall(stores: list[Store], query: str, *, limit: int = 10, types: Iterable[str] = (), branch: str | None = None,
           include_all: bool = False, keyword_only: bool = False, now: float | None = None,
           indexes: Any = None) -> RecallResult:
    """Recall across stores (project first): at most `limit` hits, linked ones (`via`) included, each right
    after the hit it was reached from. Archived and superseded hits come back with `include_all`, as they are:
    reading never changes a memory (`cortex restore` brings one back). `indexes` (a `cortex.index.Indexes`) holds the warm
    indexes of a resident process, or of one command: each store is synced at most once through it."""
    from cortex.index import Indexes

    indexes = indexes or Indexes()
    hits: list[Hit] = []
    notes: list[str] = []
    for store in stores:
        result = recall_store(store, query, limit=limit, types=types, branch=branch, include_all=include_all,
                              keyword_only=keyword_only, now=now, index=indexes.synced(store, full=True), sync=False)
        hits.extend(result.hits)
        for note in result.notes:
            if note not in notes:
                notes.append(note)
    # `limit` bounds everything returned, linked hits included: the best `limit` by score, where a linked
    # hit scores just under its parent (× the link's strength), so it may take a weaker direct hit's place
    # and never comes without its parent. Each linked hit is listed right after its parent.
    order = {store.label: i for i, store in enumerate(stores)}

    def rank(h: Hit) -> tuple[float, int, bool, str]:
        return -round(h.score, 9), order.get(h.store, 9), h.via is not None, h.memory.id

    direct = sorted((h for h in hits if h.via is None), key=rank)[:limit]
    parents = {(h.store, h.memory.id) for h in direct}
    linked = [h for h in hits if h.via is not None and (h.store, h.via.rsplit(" of ", 1)[-1]) in parents
              and (h.store, h.memory.id) not in parents]
    chosen = {id(h) for h in sorted(direct + linked, key=rank)[:limit]}
    final: list[Hit] = []
    for parent in direct:
        if id(parent) in chosen:
            final.append(parent)
            final.extend(h for h in linked if id(h) in chosen and h.store == parent.store
                         and h.via is not None and h.via.endswith(f" of {parent.memory.id}"))
    for store in stores:
        store.record_access(h.memory.id for h in final if h.store == store.label)
    return RecallResult(final, notes)
