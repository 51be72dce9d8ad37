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
   marked `via`. Code memories are not searched directly (unless `types`
   names `code`): they come back this way, behind their description.

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
FUSION = "rrf"  # "convex" (weighted sum of scores over each list's best) was measured and not chosen
STRONG_LINK = 0.4
HALF_LIVES = {"progress": 7.0, "context": 30.0, "gotcha": 45.0, "pattern": 60.0}


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


def _days_since(stamp: str, now: float) -> float:
    import datetime as dt

    if not stamp:
        return 0.0
    moment = dt.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.timezone.utc).timestamp()
    return max(0.0, (now - moment) / 86400.0)


def decayed_confidence(memory: Memory, now: float, access: int = 0, centrality: float = 0.0) -> float:
    """`confidence × 0.5^(days / half_life)`; some types and pinned memories never decay."""
    half_life = HALF_LIVES.get(memory.type)
    if half_life is None or memory.pinned:
        return memory.confidence
    if access > 10 or centrality > 0.5:
        half_life *= 2
    return memory.confidence * 0.5 ** (_days_since(memory.updated or memory.created, now) / half_life)


def centralities(memories: Iterable[Memory]) -> dict[str, float]:
    """In-degree weighted by link strength, normalised to 0..1."""
    degree: dict[str, float] = {}
    for memory in memories:
        for link in memory.links:
            degree[link.to] = degree.get(link.to, 0.0) + (link.strength if link.strength is not None else 1.0)
    top = max(degree.values(), default=0.0)
    return {k: v / top for k, v in degree.items()} if top > 0 else {}


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
    if FUSION == "convex":
        total = sum(weights[name] for name in ranked) or 1.0
        for name, hits in ranked.items():
            top = max((score for _, score in hits), default=0.0)
            if top <= 0:
                continue
            for rel, score in hits:
                fused[rel] = fused.get(rel, 0.0) + weights[name] * max(score, 0.0) / top / total
        return fused, ranks, raw
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
    weights = config.get("recall.weights")
    prior_weight = float(config.get("recall.prior_weight"))
    list_weights = {name: float(value) for name, value in config.get("recall.list_weights").items()}
    bm25_floor = float(config.get("recall.bm25_floor"))
    index = index or Index(store)
    if keyword_only:
        index._encoder_tried = True  # never load the model
    if sync or index.manifest is None:
        index.sync(full=True)
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
    access = store.access_counts()
    max_log = math.log(max(access.values(), default=0) + 1) or 1.0
    central = index.centralities()
    current = store.current_branch()
    weight_sum = sum(float(v) for v in weights.values()) or 1.0
    root = store.memories_dir
    scored = []
    for rel, value in fused.items():
        m = memory_from_meta(index.manifest.meta(rel), root / rel)
        prior = (
            weights["confidence"] * decayed_confidence(m, now, access.get(m.id, 0), central.get(m.id, 0.0))
            + weights["priority"] * m.priority / 10
            + weights["centrality"] * central.get(m.id, 0.0)
            + weights["access"] * math.log(access.get(m.id, 0) + 1) / max_log
            + weights["same_branch"] * (1.0 if current is not None and m.branch == current else 0.0)
        ) / weight_sum
        scored.append(Hit(m, value + prior_weight * prior, store.label, ranks=ranks[rel], raw=raw.get(rel, {})))
    scored.sort(key=lambda h: (-h.score, h.memory.id))
    hits = scored[:limit]
    # One hop along source_of and strong relates_to links. Hops ignore the type and
    # branch filters: code comes back with its description whatever was asked.
    rel_of_id = index.rel_of_id()
    shown = {h.memory.id for h in hits}
    out: list[Hit] = []
    for hit in hits:
        out.append(hit)
        for link in hit.memory.links:
            strong = link.rel == "relates_to" and (link.strength or 0.0) >= STRONG_LINK
            target = rel_of_id.get(link.to)
            if (link.rel == "source_of" or strong) and target and link.to not in shown \
                    and records[target]["status"] in statuses:
                shown.add(link.to)
                factor = 1.0 if link.rel == "source_of" else float(link.strength or 0.0)
                linked = memory_from_meta(index.manifest.meta(target), root / target)
                out.append(Hit(linked, hit.score * factor * 0.99, store.label, via=f"{link.rel} of {hit.memory.id}"))
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
           indexes: dict[str, Any] | None = None, restore: bool = True) -> RecallResult:
    """Recall across stores (project first); archived hits found with `include_all` are restored to active
    (unless `restore` is False: a read-only caller). `indexes` maps a store's label to a warm Index that a
    resident process keeps in step with the files: those stores are searched without a sync."""
    hits: list[Hit] = []
    notes: list[str] = []
    for store in stores:
        warm = (indexes or {}).get(store.label)
        result = recall_store(store, query, limit=limit, types=types, branch=branch, include_all=include_all,
                              keyword_only=keyword_only, now=now, index=warm, sync=warm is None)
        hits.extend(result.hits)
        for note in result.notes:
            if note not in notes:
                notes.append(note)
    order = {store.label: i for i, store in enumerate(stores)}
    direct = [h for h in hits if h.via is None]
    direct.sort(key=lambda h: (-round(h.score, 9), order.get(h.store, 9), h.memory.id))
    keep = {(h.store, h.memory.id) for h in direct[:limit]}
    final: list[Hit] = []
    for hit in direct[:limit]:
        final.append(hit)
        parent = hit.memory.id
        final.extend(h for h in hits if h.via is not None and h.via.endswith(f" of {parent}") and h.store == hit.store
                     and (h.store, h.memory.id) not in keep)
    by_label = {store.label: store for store in stores}
    for hit in final:
        store = by_label[hit.store]
        if hit.memory.status == "archived" and include_all and restore:
            hit.memory = store.restore(hit.memory.id)
    for store in stores:
        store.record_access(h.memory.id for h in final if h.store == store.label)
    return RecallResult(final, notes)
