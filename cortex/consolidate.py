"""Consolidation (`cortex consolidate`): merge near-duplicate memories into one, all or nothing. docs/graph.md.

The static model names candidate pairs, the duplicate score (`Judge`) decides, a pair differing in a claim is
never grouped automatically; a checkpoint lets the next run roll back one killed half-way.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
import sys
import uuid
from collections import Counter, defaultdict, deque
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Mapping
from typing import Any

from cortex import memory as fmt
from cortex.errors import CortexError
from cortex.files import atomic_write, file_lock
from cortex.graph import NO_LINK_TYPES, Similarity, candidate_floor, clear_flagged_pairs, clear_flags, flagged
from cortex.claims import Claims, claims, conflict, different_choices, present
from cortex.memory import Link, Memory
from cortex.store import Store, guard_text
from cortex.text import words

STATIC_AUTO, STATIC_MANUAL = 0.7, 0.5  # thresholds on the static similarity, when there is no contextual model
CANDIDATES = 5  # a memory's duplicate is looked for among its 5 nearest of its type (static model)
CHECKPOINT = "consolidate-checkpoint"


@dataclass
class Group:
    type: str
    members: list[Memory]
    similarity: float  # the lowest duplicate score between two members (Judge; the static similarity without it)
    found: dict[Path, bytes] = field(default_factory=dict)  # each member's bytes when it was read
    conflict: str | None = None  # why the members are not one memory (`conflict`): merged only if a person says so
    merged: Memory | None = None  # the memory that would replace the group (`preview`)
    settled: bool = False  # `merged` is what `apply` writes (the LLM was asked, when it may run)
    veto: str | None = None  # why the LLM's answer stopped the merge (`preview`)

    @classmethod
    def read(cls, paths: list[Path], similarity: float, conflict: str | None = None) -> Group:
        raw = {path: path.read_bytes() for path in paths}
        members = [fmt.parse(data.decode("utf-8"), path) for path, data in raw.items()]
        return cls(members[0].type, members, similarity, raw, conflict)

    def to_dict(self) -> dict[str, Any]:
        out = {"type": self.type, "similarity": round(self.similarity, 3), "conflict": self.conflict,
               "members": [{"id": m.id, "title": m.title} for m in self.members]}
        if self.merged is not None:
            out["merged"] = {"title": self.merged.title, "text": self.merged.body.strip()}
        return out


@dataclass
class Result:
    groups: list[Group] = field(default_factory=list)
    merged: list[tuple[str, list[str]]] = field(default_factory=list)  # (new id, original ids)


# ---------------------------------------------------------------- finding groups


def _eligible(records: Mapping[str, dict[str, Any]], automatic: bool = False) -> dict[str, list[str]]:
    """Active, unpinned, non-code memories by type; `automatic` leaves out those capture updates (`source.key`)."""
    by_type: dict[str, list[str]] = {}
    for rel, entry in records.items():
        if entry["status"] != "active" or entry["type"] in NO_LINK_TYPES:
            continue
        meta = json.loads(entry["meta"])
        if meta.get("pinned", False) or (automatic and (meta.get("source") or {}).get("key")):
            continue
        by_type.setdefault(entry["type"], []).append(rel)
    return by_type


def _clusters(pairs: list[tuple[float, str, str]], score_of: Any, conflict_of: Any, threshold: float
              ) -> tuple[list[tuple[list[str], float]], list[tuple[float, str, str, str]]]:
    """Groups by complete linkage, strictest pair first (a chain A~B~C whose ends differ stays apart), with their
    lowest score; and the pairs not grouped because they differ in a claim (score, a, b, reason). A memory whose
    closest partner differs from it joins no group."""
    group_of: dict[str, int] = {}
    members: dict[int, list[str]] = {}
    lowest: dict[int, float] = {}
    clashes: list[tuple[float, str, str, str]] = []
    contested: set[str] = set()
    seen: set[str] = set()
    for _score, a, b in pairs:  # strictest first: a memory's first pair is its closest
        if (a not in seen or b not in seen) and conflict_of(a, b):
            contested |= {a, b} - seen
        seen |= {a, b}
    next_key = 0
    for score, a, b in pairs:
        first, second = group_of.get(a), group_of.get(b)
        if first is not None and first == second:
            continue
        reason = conflict_of(a, b)
        if reason:
            clashes.append((score, a, b, reason))
            continue
        if a in contested or b in contested:
            continue
        left = members[first] if first is not None else [a]
        right = members[second] if second is not None else [b]
        worst = min([score] + [lowest[g] for g in (first, second) if g is not None])
        joined = True
        for x in left:
            for y in right:
                if {x, y} == {a, b}:
                    continue
                other = score_of(x, y)
                if other < threshold or conflict_of(x, y):
                    joined = False
                    break
                worst = min(worst, other)
            if not joined:
                break
        if not joined:
            continue
        key = next_key
        next_key += 1
        for g in (first, second):
            if g is not None:
                members.pop(g)
                lowest.pop(g)
        members[key] = sorted(set(left) | set(right))
        lowest[key] = worst
        for rel in members[key]:
            group_of[rel] = key
    return [(members[g], lowest[g]) for g in sorted(members)], clashes


class Judge:
    """The duplicate score of two memories: idf-weighted BERTScore F1 on the contextual model, over one window of
    `TOKENS` tokens (a longer text's first and last halves); kept in `cache/duplicate-scores.json` by text hash until
    the store halves or doubles."""

    TOKENS = 64
    CACHE = "duplicate-scores.json"
    IDF_SAMPLE = 4000
    CHUNK = 256  # memories encoded at a time by `judge`

    def __init__(self, store: Store, rels: list[str], records: Mapping[str, dict[str, Any]] | None = None) -> None:
        from cortex import contextual

        self.store = store
        self.encoder = contextual.Encoder(max_tokens=self.TOKENS)
        self.records = records or {}
        self._rels = list(rels)
        self._texts: dict[str, str] = {}
        total = len(rels)
        step = max(1, -(-total // self.IDF_SAMPLE))  # idf from a sample: a big store's reads cost more than judging
        sample = rels[::step]
        tokenizer = self.encoder.tokenizer
        encoded = tokenizer.encode_batch([self.text(rel) for rel in sample], add_special_tokens=False) if sample else []
        frequency: Counter[int] = Counter(t for e in encoded for t in set(e.ids))
        self._idf = {token: math.log((len(sample) + 1) / (count + 1)) for token, count in frequency.items()}
        self._unseen = math.log(len(sample) + 1)
        self._encoded: dict[str, Any] = {}
        self.encoded_count = 0
        self._model = f"{contextual.NAME}:{self.TOKENS}:halves"
        self._size = total  # the store size the kept scores were computed at (idf drifts as it grows)
        self._cached: dict[str, float] = {}
        self._dirty = False
        try:
            data = json.loads((store.cache_dir / self.CACHE).read_text(encoding="utf-8"))
            size = int(data["size"])
            if data.get("model") == self._model and size / 2 < max(total, 1) < size * 2:
                self._cached = {str(k): float(v) for k, v in data["scores"].items() if math.isfinite(float(v))}
                self._size = size
        except (OSError, ValueError, AttributeError, KeyError, TypeError):
            pass

    def text(self, rel: str) -> str:
        if rel not in self._texts:
            self._texts[rel] = _memory_text(self.store, rel)
        return self._texts[rel]

    def key_of(self, rel: str) -> str:
        """The hash of the memory's text (the cache's vhash when known): scores are kept by it."""
        from cortex.index.manifest import text_hash

        return self.records.get(rel, {}).get("vhash") or text_hash(self.text(rel))

    def _key(self, a: str, b: str) -> str:
        first, second = sorted((self.key_of(a), self.key_of(b)))
        return f"{first}:{second}"

    def known(self, a: str, b: str) -> bool:
        return self._key(a, b) in self._cached

    def prepare(self, rels: set[str] | list[str]) -> None:
        """Encode the memories not yet encoded, in one batch."""
        missing = sorted(rel for rel in set(rels) if rel not in self._encoded)
        for rel, item in zip(missing, self.encoder.encode([self.text(rel) for rel in missing], tail=True)):
            self._encoded[rel] = item
        self.encoded_count += len(missing)

    def judge(self, edges: set[tuple[str, str]]) -> None:
        """Score every pair in `edges`, each memory encoded once: `CHUNK` at a time in breadth-first order of the
        pairs, an encoding dropped once its pairs are scored (encodings are large)."""
        pending = sorted(edge for edge in edges if not self.known(*edge))
        pairs_of: dict[str, set[str]] = defaultdict(set)
        for a, b in pending:
            pairs_of[a].add(b)
            pairs_of[b].add(a)
        order: list[str] = []
        seen: set[str] = set()
        for start in sorted(pairs_of):
            if start in seen:
                continue
            seen.add(start)
            queue = deque([start])
            while queue:
                node = queue.popleft()
                order.append(node)
                for other in sorted(pairs_of[node] - seen):
                    seen.add(other)
                    queue.append(other)
        left = {node: len(others) for node, others in pairs_of.items()}
        for begin in range(0, len(order), self.CHUNK):
            chunk = order[begin:begin + self.CHUNK]
            self.prepare(chunk)
            for node in chunk:
                for other in sorted(pairs_of[node]):
                    if other in self._encoded and not self.known(node, other):
                        self.score(node, other)
                        for end in (node, other):
                            left[end] -= 1
                            if left[end] == 0:
                                self._encoded.pop(end, None)

    def release(self) -> None:
        self._encoded.clear()

    def score(self, a: str, b: str) -> float:
        key = self._key(a, b)
        if key not in self._cached:
            import numpy as np

            self.prepare([a, b])
            first, second = self._encoded[a], self._encoded[b]
            if not first.ids or not second.ids:
                self._cached[key] = 0.0
                return 0.0
            sim = first.states.astype(np.float32) @ second.states.astype(np.float32).T
            weights_a = np.asarray([self._idf.get(t, self._unseen) for t in first.ids], dtype=np.float32)
            weights_b = np.asarray([self._idf.get(t, self._unseen) for t in second.ids], dtype=np.float32)
            if float(weights_a.sum()) < 1e-6 or float(weights_b.sum()) < 1e-6:
                weights_a, weights_b = np.ones_like(weights_a), np.ones_like(weights_b)  # words every memory has
            recall = float((sim.max(axis=1) * weights_a).sum() / float(weights_a.sum()))
            precision = float((sim.max(axis=0) * weights_b).sum() / float(weights_b.sum()))
            both = recall + precision
            self._cached[key] = round(2 * recall * precision / both, 5) if both > 0 else 0.0
            self._dirty = True
        return self._cached[key]

    def save(self) -> None:
        """Write the scores back (those of texts no longer in the store are dropped). A cache: never fatal."""
        if not self._dirty:
            return
        live = {entry.get("vhash") for entry in self.records.values()} if self.records else \
            {self.key_of(rel) for rel in self._rels}
        scores = {k: v for k, v in self._cached.items() if set(k.split(":")) <= live}
        try:
            self.store.cache_dir.mkdir(parents=True, exist_ok=True)
            atomic_write(self.store.cache_dir / self.CACHE,
                         json.dumps({"model": self._model, "size": self._size, "scores": scores}), durable=False)
        except OSError as exc:
            self.store.log(f"consolidate: cannot keep the duplicate scores: {exc!r}")


def _judge(store: Store, records: Mapping[str, dict[str, Any]]) -> Judge | None:
    from cortex.embedding import EncoderUnavailable

    every = sorted(rel for rel, e in records.items() if e["status"] == "active" and e["type"] not in NO_LINK_TYPES)
    try:
        return Judge(store, every, records)
    except EncoderUnavailable as exc:
        store.log(f"consolidate: {exc}; judging duplicates by the static similarity instead")
        return None


def _candidates(similarity: Similarity, seeds: list[str], rels: list[str], floor: float, most: int,
                above_too: bool = True) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """Each seed's `most` nearest memories at least `floor` similar, and (`above_too`) every memory at least `floor`."""
    near: dict[str, list[str]] = {}
    above: dict[str, list[str]] = {}
    if not seeds or len(rels) < 2:
        return near, above
    if similarity.method == "cosine":
        import numpy as np

        mine, theirs = similarity.matrix_for(seeds), similarity.matrix_for(rels)
        position = {rel: k for k, rel in enumerate(rels)}
        step = max(8, min(1024, 4_000_000 // max(1, len(rels))))  # a block of <= 16 MB of scores
        keep = min(most, len(rels) - 1)
        for start in range(0, len(seeds), step):
            block = mine[start:start + step] @ theirs.T
            for i in range(block.shape[0]):
                a = seeds[start + i]
                if a in position:
                    block[i, position[a]] = -2.0  # not its own neighbour
            top = np.argpartition(-block, keep - 1, axis=1)[:, :keep] if keep > 0 else np.zeros((len(block), 0), int)
            for i in range(block.shape[0]):
                ranked = sorted(top[i], key=lambda j: (-block[i, j], j))
                near[seeds[start + i]] = [rels[int(j)] for j in ranked if block[i, j] >= floor]
                if above_too:
                    above[seeds[start + i]] = [rels[int(j)] for j in np.nonzero(block[i] >= floor)[0]]
    else:
        for a in seeds:
            others = [o for o in rels if o != a]
            scores = similarity.against(a, others)
            ranked = sorted(zip(scores, others), key=lambda p: (-p[0], p[1]))
            near[a] = [o for sc, o in ranked[:most] if sc >= floor]
            if above_too:
                above[a] = [o for sc, o in ranked if sc >= floor]
    return near, above


def _edges(similarity: Similarity, rels: list[str], seeds: list[str] | None, floor: float
           ) -> tuple[set[tuple[str, str]], set[str]]:
    """The candidate pairs to judge, and the memories whose every candidate pair is among them (only those may be
    grouped); the automatic run (`seeds`) starts from the flagged memories and their partners."""
    if seeds is None:
        near, _above = _candidates(similarity, rels, rels, floor, CANDIDATES, above_too=False)
        return {(a, b) if a < b else (b, a) for a, others in near.items() for b in others}, set(rels)
    near, above = _candidates(similarity, seeds, rels, floor, CANDIDATES)

    def fill(members: set[str]) -> None:  # candidates of every memory that may list one of `members`
        missing = sorted({x for m in members for x in above[m]} - set(near))
        more_near, more_above = _candidates(similarity, missing, rels, floor, CANDIDATES)
        near.update(more_near)
        above.update(more_above)

    fill(set(seeds))
    partners = {b for s in seeds for b in near[s]} | {x for s in seeds for x in above[s] if s in near.get(x, ())}
    todo = sorted(partners - set(above))
    more_near, more_above = _candidates(similarity, todo, rels, floor, CANDIDATES)
    near.update(more_near)
    above.update(more_above)
    fill(partners)
    complete = set(seeds) | partners
    edges = set()
    for member in complete:
        for other in near[member]:
            edges.add((member, other) if member < other else (other, member))
        for other in above[member]:
            if member in near.get(other, ()):
                edges.add((member, other) if member < other else (other, member))
    return edges, complete


def _within_budget(judge: Judge, edges: set[tuple[str, str]], budget: int, similarity: Similarity
                   ) -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
    """The pairs this run can judge (scored before, or new with at most `budget` memories to encode, the most
    similar first) and those left for the next run."""
    ready = {edge for edge in edges if judge.known(*edge)}
    new = sorted(edges - ready, key=lambda edge: (-similarity.against(edge[0], [edge[1]])[0], edge))
    to_encode: set[str] = set()
    waiting: set[tuple[str, str]] = set()
    for edge in new:
        more = {rel for rel in edge if rel not in to_encode}
        if len(to_encode) + len(more) > budget:
            waiting.add(edge)
            continue
        to_encode |= more
        ready.add(edge)
    if waiting:
        judge.store.log(f"consolidate: {len(waiting)} candidate pairs wait for the next run "
                        f"({judge.encoded_count + len(to_encode)} memories encoded, the most one run may)")
    return ready, waiting


class _ClaimCheck:
    """Why two memories (by path) are not one: a `contradicts` link, decisions picking different things, a claim
    they differ in; `off` (--allow-conflicts) checks the links only."""

    def __init__(self, store: Store, referee: Judge | None, off: bool, records: Mapping[str, dict[str, Any]]) -> None:
        self.store, self.referee, self.off, self.records = store, referee, off, records
        self._claims: dict[str, Claims] = {}
        self._reasons: dict[tuple[str, str], str | None] = {}
        self._linked: set[frozenset[str]] | None = None

    def text_of(self, rel: str) -> str:
        return self.referee.text(rel) if self.referee is not None else _memory_text(self.store, rel)

    def claims_of(self, rel: str) -> Claims:
        if rel not in self._claims:
            self._claims[rel] = claims(self.text_of(rel))
        return self._claims[rel]

    def linked(self, a: str, b: str) -> bool:
        """A `contradicts` link between them, written in either file."""
        if self._linked is None:
            self._linked = set()
            for rel in self.records:
                for kind, to, *_rest in self.records[rel].get("links") or ():
                    if kind == "contradicts":
                        self._linked.add(frozenset((self.records[rel]["id"], to)))
        return frozenset((self.records[a]["id"], self.records[b]["id"])) in self._linked

    def __call__(self, a: str, b: str) -> str | None:
        if (a, b) not in self._reasons:
            reason = "a contradicts link" if self.linked(a, b) else None
            if reason is None and not self.off:
                reason = conflict(self.claims_of(a), self.claims_of(b))
                if reason is None and self.records[a]["type"] == self.records[b]["type"] == "decision":
                    reason = different_choices(self.text_of(a), self.text_of(b))
            self._reasons[(a, b)] = reason
        return self._reasons[(a, b)]


def _memory_text(store: Store, rel: str) -> str:
    """A memory's text as the index embeds it, "" when it cannot be read."""
    from cortex.index.manifest import embed_text

    path = store.memories_dir / rel
    try:
        return embed_text(fmt.parse(path.read_text(encoding="utf-8"), path))
    except (OSError, UnicodeDecodeError, CortexError):
        return ""


def find_groups(store: Store, threshold: float | None = None, only_flagged: bool = False,
                similarity: Similarity | None = None, judge: bool | Judge = True, progress: bool = False,
                report: dict[str, Any] | None = None, conflicts: str = "skip") -> list[Group]:
    """Groups of near-duplicates, most similar first (`only_flagged`: from the pairs flagged at write time).

    `report` gets `by` (what decided), `threshold`, `waiting` (memories put off by the run's encoding budget) and
    `contested` (id, id, reason). `conflicts="show"` returns pairs that differ as groups of two with `conflict`
    set; `conflicts="allow"` does not check claims."""
    if conflicts not in ("skip", "show", "allow"):
        raise ValueError(f"conflicts must be skip, show or allow, not {conflicts!r}")
    config = store.config()
    if threshold is None:
        threshold = float(config.get("consolidate.manual_threshold"))
    similarity = similarity or Similarity(store)
    records = similarity.records()
    by_type = _eligible(records, automatic=only_flagged)
    rel_of = {entry["id"]: rel for rel, entry in records.items()}
    out = report if report is not None else {}
    out.update(by="duplicate score", threshold=threshold, waiting=set(), contested=[])
    if only_flagged and not flagged(store):
        return []
    referee = judge if isinstance(judge, Judge) else _judge(store, records) if judge and by_type else None
    if referee is None and judge is not False and similarity.method == "cosine":
        # no contextual model: the static similarity decides, at the thresholds it was measured safe with
        threshold = max(threshold, STATIC_AUTO if only_flagged else STATIC_MANUAL)
    if referee is None:
        out.update(by="static similarity", threshold=threshold)
    # memories one run may encode: a run's time stays bounded (the rest is judged by the next run)
    budget = max(2, int(config.get("consolidate.max_judged" if only_flagged else "consolidate.max_judged_by_hand")))
    floor = candidate_floor(float(config.get("consolidate.candidate_threshold")), similarity.method) \
        if referee is not None else threshold
    score_of = referee.score if referee is not None else (lambda a, b: similarity.against(a, [b])[0])

    flagged_pairs = {tuple(sorted((rel_of.get(a) or "", rel_of.get(b) or ""))) for a, b, _ in flagged(store)} \
        if only_flagged else set()
    marked = {rel for pair in flagged_pairs for rel in pair}  # the automatic run starts only from these
    found: list[tuple[list[str], float]] = []
    shown: list[tuple[list[str], float, str]] = []
    differ = _ClaimCheck(store, referee, conflicts == "allow", records)
    for kind, rels in sorted(by_type.items()):
        rels = sorted(rels)
        eligible = set(rels)
        edges, complete = _edges(similarity, rels, sorted(marked & eligible) if only_flagged else None, floor)
        waiting: set[tuple[str, str]] = set()
        if referee is not None:
            edges, waiting = _within_budget(referee, edges, budget - referee.encoded_count, similarity)
            todo = {rel for edge in edges for rel in edge if not referee.known(*edge)}
            if progress and len(todo) > 200:
                print(f"cortex: judging {len(todo)} {kind} memories with the contextual model "
                      f"(about {len(todo) // 100 + 1} s)…", file=sys.stderr, flush=True)
            referee.judge(edges)
        scored = {edge: score_of(*edge) for edge in sorted(edges)}
        if referee is not None:
            referee.release()
        # a memory whose best partner may be among the pairs still waiting is not grouped this run
        postponed = {rel for edge in waiting for rel in edge}
        unsure = postponed | {rel for edge in edges for rel in edge if rel not in complete}
        held = postponed | {rel for edge in edges | waiting for rel in edge if set(edge) & postponed}
        out["waiting"].update(records[rel]["id"] for rel in held)
        pairs = sorted(((s, a, b) for (a, b), s in scored.items()
                        if s >= threshold and a not in unsure and b not in unsure
                        and (not only_flagged or a in marked or b in marked)),
                       key=lambda p: (-p[0], p[1], p[2]))

        def pair_score(a: str, b: str) -> float:  # a pair inside a group that was no candidate is scored now
            edge = (a, b) if a < b else (b, a)
            if edge not in scored:
                scored[edge] = score_of(*edge)
            return scored[edge]

        groups_here, clashes = _clusters(pairs, pair_score, differ, threshold)
        found.extend(groups_here)
        placed = {rel for rels, _low in groups_here for rel in rels}
        for score, a, b, reason in clashes:
            out["contested"].append((records[a]["id"], records[b]["id"], reason))
            if conflicts == "skip":
                store.log(f"consolidate: {records[a]['id']} and {records[b]['id']} differ ({reason}): not merged")
            if conflicts == "show" and a not in placed and b not in placed:
                placed |= {a, b}
                shown.append(([a, b], score, reason))
    if referee is not None:
        referee.save()
    root = store.memories_dir
    groups = []
    for rels, low, why in [(rels, low, None) for rels, low in found] + shown:
        try:
            groups.append(Group.read([root / rel for rel in sorted(rels)], low, why))
        except (OSError, UnicodeDecodeError, CortexError):
            continue  # changed under us since the cache saw it: the next run looks again
    groups.sort(key=lambda g: (-g.similarity, g.members[0].id))
    return groups


# ---------------------------------------------------------------- merging


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+|\n+", text) if s.strip()]


def merged_memory(group: Group, llm_text: str | None = None) -> Memory:
    """The memory that replaces a group (see the module docstring)."""
    members = group.members
    best = max(members, key=lambda m: (m.priority, m.confidence, len(m.body.strip()), m.id))
    if llm_text:
        lines = llm_text.strip().splitlines()
        title = lines[0].removeprefix("Title:").strip() if lines and lines[0].lower().startswith("title:") else best.title
        body = "\n".join(lines[1:]).strip() if title != best.title or (lines and lines[0].lower().startswith("title:")) \
            else llm_text.strip()
        body = body or best.body.strip()
    else:
        title, body = best.title, best.body.strip()
        covered = words(title + " " + body)
        extra = []
        for other in members:
            if other is best:
                continue
            for sentence in _sentences(other.body):
                new_words = words(sentence) - covered
                if len(new_words) >= max(2, len(words(sentence)) // 2):
                    extra.append(sentence)
                    covered |= new_words
        if extra:
            body += "\n\n" + " ".join(extra)
    body = _keep_claims(title, body, [m for m in members if llm_text or m is not best])
    ids = {m.id for m in members}
    links: dict[tuple[str, str], Link] = {}
    for member in members:
        for link in member.links:
            if link.to in ids or link.rel == "supersedes":
                continue  # links inside the group disappear; a person's supersedes stays with the original
            key = (link.rel, link.to)
            if key not in links or (link.strength or 0) > (links[key].strength or 0):
                links[key] = Link(link.rel, link.to, link.strength)
    derived = [Link("derived_from", m.id) for m in members]
    return Memory(
        id="",
        type=group.type,
        title=fmt.title_from_text(title, fmt.TITLE_MAX),
        body=body + "\n",
        confidence=max(m.confidence for m in members),
        priority=max(m.priority for m in members),
        tags=list(dict.fromkeys(t for m in members for t in m.tags)),
        files=list(dict.fromkeys(f for m in members for f in m.files)),
        branch=best.branch,
        source={"kind": "consolidation", "from": sorted(ids)},
        links=derived + list(links.values()),
    )


def _missing_claims(sentence: str, kept: Claims, every_name: bool = False) -> bool:
    """Whether a sentence states something the merged text does not: a number, version, name (not a capital
    that merely opens a sentence, unless `every_name`), identifier, or a negation."""
    said = claims(sentence)
    if any(not present(item, kept) for item in said.items
           if every_name or not (item.kind == "name" and item.initial)):
        return True
    negated = {stem for _before, stem in kept.negated}
    return any(stem not in negated for _before, stem in said.negated)


def _keep_claims(title: str, body: str, others: list[Memory]) -> str:
    """The merged text with every claim of the members: a member's sentence holding a claim the text lacks (an
    extra number, name, version, identifier or negation another member does not contradict) is appended."""
    from cortex.index.manifest import embed_text

    kept = claims(f"{title}\n{body}")
    extra: list[str] = []
    for member in others:
        # a member that differs from the text (merged by a person's choice) keeps even a name opening a sentence
        differs = conflict(claims(embed_text(member)), kept) is not None
        for sentence in _sentences(embed_text(member)):
            if sentence not in extra and _missing_claims(sentence, kept, every_name=differs):
                extra.append(sentence)
                kept = claims(f"{title}\n{body}\n" + " ".join(extra))
    if not extra:
        return body
    return body + "\n\n" + " ".join(extra)


def preview(store: Store, group: Group, use_llm: bool = True) -> Memory | None:
    """The memory that would replace the group, kept as `group.merged` for `apply` (with `use_llm` the LLM's text
    when it may run); None when the LLM vetoes or cannot be read (`group.veto` says which)."""
    if group.settled:
        return group.merged
    asked = use_llm and _llm_on(store)
    llm_text = _llm_merge(store, group) if asked else None
    ids = ", ".join(m.id for m in group.members)
    if asked and (llm_text is None or _says_different(llm_text)
                  or not llm_text.lstrip().lower().startswith("title:")):
        group.veto = "the LLM says these memories differ" if llm_text is not None and _says_different(llm_text) \
            else "the LLM's answer could not be read (a veto not understood is a no)"
        store.log(f"consolidate: {ids} not merged: {group.veto}")
        group.merged, group.settled = None, True
        return None
    group.merged, group.settled = merged_memory(group, llm_text), use_llm
    return group.merged


def _llm_on(store: Store) -> bool:
    from cortex.llm import enabled

    return enabled(store)


def _llm_merge(store: Store, group: Group) -> str | None:
    """The LLM's merged text, or None (`cortex.llm.ask`)."""
    from cortex.llm import ask

    prompt = ("Merge these project memories, which say the same thing, into one. Keep every distinct fact, reason "
              "and rejected alternative; no new facts. Answer as 'Title: <one line>' then a blank line then the "
              "text. If they do not say the same thing, answer only the word DIFFERENT.\n\n"
              + "\n\n".join(f"- {m.title}\n{m.body.strip()}" for m in group.members))
    return ask(store, prompt, "consolidate")


def _says_different(answer: str) -> bool:
    """The LLM vetoed the merge: DIFFERENT, however dressed (**DIFFERENT**, "They are DIFFERENT.")."""
    first = re.sub(r"[^A-Za-z ]", " ", answer.strip().splitlines()[0] if answer.strip() else "").split()
    return "DIFFERENT" in first or (not answer.lstrip().lower().startswith("title:") and "DIFFERENT" in answer)


def _checkpoint_dir(store: Store) -> Path:
    return store.state_dir / CHECKPOINT


def recover(store: Store) -> bool:
    """Roll back a consolidation that was cut off half-way (its checkpoint is still there). True if it did."""
    with store.lock(), file_lock(store.state_dir / "consolidate.lock"):
        return _recover_locked(store)


def _recover_locked(store: Store) -> bool:
    folder = _checkpoint_dir(store)
    plan_path = folder / "plan.json"
    if not plan_path.is_file():  # no plan: nothing was renamed yet, or the run finished (the plan goes first)
        shutil.rmtree(folder, ignore_errors=True)
        return False
    data = json.loads(plan_path.read_text(encoding="utf-8"))
    missing = [saved for saved in data["originals"].values() if not (folder / saved).is_file()]
    if missing:
        raise CortexError(f"{folder}: the checkpoint misses {', '.join(missing)}; restore the originals from git "
                          f"(git checkout -- .cortex/memories) and delete the folder")
    # Undo only what the cut-off run left: a file changed since (a person's edit) stops the rollback.
    written = data.get("written", {})
    changed = []
    for original, saved in data["originals"].items():
        now = _digest_of(Path(original))
        if now not in (written.get(original), _digest_of(folder / saved)):
            changed.append(original)
    for new in data["new"]:
        now = _digest_of(Path(new))
        if now is not None and now != written.get(new):
            changed.append(new)
    if changed:
        raise CortexError(f"{folder}: an interrupted consolidation, but {', '.join(changed)} changed since; "
                          f"nothing was rolled back. Check those files (git diff), then delete {folder}")
    for original, saved in data["originals"].items():
        atomic_write(Path(original), (folder / saved).read_bytes())
    for new in data["new"]:
        Path(new).unlink(missing_ok=True)
    for temp in data.get("temps", []):
        Path(temp).unlink(missing_ok=True)
    plan_path.unlink()
    shutil.rmtree(folder, ignore_errors=True)
    store.mark_changed()
    store.log("consolidate: rolled back an unfinished consolidation from its checkpoint")
    return True


def _digest_of(path: Path) -> str | None:
    try:
        return hashlib.sha1(path.read_bytes()).hexdigest()
    except OSError:
        return None


def _rename(source: Path, target: Path) -> None:
    os.replace(source, target)


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def apply(store: Store, groups: list[Group], use_llm: bool = True) -> Result:
    """Merge every group in one all-or-nothing step; the texts are made before the lock (a slow LLM holds up no
    writer), and a group whose member changed since it was found is skipped."""
    result = Result(groups=[])
    if not groups:
        return result
    prepared = _prepare(store, groups, use_llm)
    with store.lock(), file_lock(store.state_dir / "consolidate.lock"):
        _recover_locked(store)
        writes, new_paths, originals = _plan_writes(store, prepared, result)
        if not writes:
            return result
        _write_all_or_nothing(store, writes, new_paths, originals)
    clear_flags(store, [m.id for g in result.groups for m in g.members])
    store.log(f"consolidate: merged {sum(len(g.members) for g in result.groups)} memories into {len(result.groups)}")
    return result


def _prepare(store: Store, groups: list[Group], use_llm: bool) -> list[tuple[Group, dict[Path, bytes], Memory]]:
    """Each group with the bytes it was found from and its merged memory (the LLM's text when it may run)."""
    prepared = []
    for group in groups:
        snapshot = dict(group.found)  # the bytes the group was built from: any change since skips it
        if not snapshot:
            try:
                snapshot = {m.path: m.path.read_bytes() for m in group.members if m.path is not None}
            except OSError:
                continue
        merged = preview(store, group, use_llm)  # what a person was shown, when the LLM was asked then
        if merged is None:
            continue  # the LLM's second opinion vetoed a false merge
        prepared.append((group, snapshot, merged))
    return prepared


def _plan_writes(store: Store, prepared: list[tuple[Group, dict[Path, bytes], Memory]], result: Result
                 ) -> tuple[list[tuple[Path, str]], list[Path], dict[Path, bytes]]:
    """Under the lock: the files to write, the new paths and the members' bytes before."""
    existing = store.ids_on_disk()
    stamp = fmt.now_iso()
    writes: list[tuple[Path, str]] = []
    new_paths: list[Path] = []
    originals: dict[Path, bytes] = {}
    for group, snapshot, merged in prepared:
        current = {}
        for path in snapshot:
            try:
                current[path] = path.read_bytes()
            except OSError:
                break
        if current != snapshot or any(fmt.parse(data.decode("utf-8"), path).status != "active"
                                      for path, data in current.items()):
            store.log(f"consolidate: skipped a group ({', '.join(m.id for m in group.members)}): changed since found")
            continue
        merged.id = fmt.new_id()
        while merged.id in existing:
            merged.id = fmt.new_id()
        existing.add(merged.id)
        merged.created = merged.updated = stamp
        path = store.memories_dir / merged.type / fmt.file_name(merged)
        text = fmt.render_new(merged)
        fmt.parse(text, path)
        guard_text(text, path)
        writes.append((path, text))
        new_paths.append(path)
        for member_path, before in current.items():
            originals[member_path] = before
            changed = fmt.edit_text(before.decode("utf-8"), {"status": "archived", "archived": stamp}, None,
                                    member_path)
            fmt.parse(changed, member_path)
            writes.append((member_path, changed))
        result.groups.append(group)
        result.merged.append((merged.id, [m.id for m in group.members]))
    return writes, new_paths, originals


def _write_all_or_nothing(store: Store, writes: list[tuple[Path, str]], new_paths: list[Path],
                          originals: dict[Path, bytes]) -> None:
    """Checkpoint the originals and the plan, write temps, rename them all, drop the plan (the commit point)."""
    folder = _checkpoint_dir(store)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    saved = {}
    for n, (original_path, data) in enumerate(originals.items()):
        atomic_write(folder / f"{n}.md", data)
        saved[str(original_path)] = f"{n}.md"
    temps = [target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.tmp") for target, _ in writes]
    digests = {str(target): hashlib.sha1(text.encode("utf-8")).hexdigest() for target, text in writes}
    atomic_write(folder / "plan.json", json.dumps({"originals": saved, "new": [str(p) for p in new_paths],
                                                   "temps": [str(t) for t in temps], "written": digests}))
    try:
        for (target, text), temp in zip(writes, temps):
            temp.parent.mkdir(parents=True, exist_ok=True)
            with open(temp, "w", encoding="utf-8") as handle:
                handle.write(text)
                handle.flush()
                os.fsync(handle.fileno())
        for (target, _text), temp in zip(writes, temps):
            _rename(temp, target)
    except BaseException as exc:
        _recover_locked(store)
        raise CortexError(f"consolidation failed and was rolled back, nothing changed: {exc}") from exc
    for folder_of_write in {target.parent for target, _ in writes}:
        _fsync_dir(folder_of_write)
    (folder / "plan.json").unlink()  # the commit point: from here the merge stands
    _fsync_dir(folder)
    shutil.rmtree(folder, ignore_errors=True)
    store.mark_changed()


def automatic(store: Store, threshold: float | None = None, dry_run: bool = False
              ) -> tuple[list[Group], Result, dict[str, Any]]:
    """The automatic run (after capture, `consolidate --auto`): flagged pairs merged without asking, the pairs that
    differ kept for a person; the groups, what was merged and `find_groups`' report."""
    report: dict[str, Any] = {}
    if threshold is None:
        threshold = float(store.config().get("consolidate.auto_threshold"))
    judged = flagged(store)
    groups = find_groups(store, threshold, only_flagged=True, report=report)
    if dry_run:
        return groups, Result(), report
    result = apply(store, groups)
    contest(store, report["contested"])
    waiting = report["waiting"]
    # judged pairs are not asked again unless flagged again; those left over budget wait for the next run
    clear_flagged_pairs(store, [(a, b) for a, b, _score in judged if a not in waiting and b not in waiting])
    return groups, result, report


def after_capture(store: Store, written: int) -> int:
    """The automatic run (`cortex maintain`, after capture): merge flagged pairs when due; returns the groups merged."""
    if written <= 0:
        return 0
    config = store.config()
    state = store.state_dir / "consolidate.json"
    with file_lock(store.state_dir / "consolidate-count.lock"):
        try:
            since = int(json.loads(state.read_text(encoding="utf-8")).get("since", 0))
        except (OSError, ValueError, AttributeError):
            since = 0
        since += written
        from cortex.index import Index

        index = Index(store)
        index.sync(full=False, progress=False)
        active = sum(1 for entry in index.records().values() if entry["status"] == "active")
        due = since >= int(config.get("consolidate.every_captures")) or active > int(config.get("consolidate.max_active"))
        atomic_write(state, json.dumps({"since": 0 if due else since}), durable=False)
    if not due or not flagged(store):
        return 0
    return len(automatic(store)[1].merged)


# ---------------------------------------------------------------- pairs kept for a person (state/contested.json)


def contest(store: Store, pairs: list[tuple[str, str, str]]) -> None:
    """Keep pairs a consolidation did not merge because they differ, for a person (`cortex status` lists them)."""
    if not pairs:
        return
    with file_lock(store.state_dir / "contested.lock"):
        known = {tuple(sorted((a, b))): why for a, b, why in _contested_raw(store)}
        known.update({tuple(sorted((a, b))): why for a, b, why in pairs})
        atomic_write(store.state_dir / "contested.json",
                     json.dumps([[a, b, why] for (a, b), why in sorted(known.items())]), durable=False)


def settle(store: Store, pairs: list[tuple[str, str]]) -> None:
    """A person decided these pairs (merged them, or kept both): no longer listed."""
    done = {tuple(sorted(pair)) for pair in pairs}
    if not done:
        return
    with file_lock(store.state_dir / "contested.lock"):
        kept = [[a, b, why] for a, b, why in _contested_raw(store) if tuple(sorted((a, b))) not in done]
        atomic_write(store.state_dir / "contested.json", json.dumps(kept), durable=False)


def _contested_raw(store: Store) -> list[tuple[str, str, str]]:
    try:
        data = json.loads((store.state_dir / "contested.json").read_text(encoding="utf-8"))
        return [(str(a), str(b), str(why)) for a, b, why in data]
    except (OSError, ValueError, TypeError):
        return []


def contested(store: Store, active: set[str]) -> list[tuple[str, str, str]]:
    """The pairs kept for a person whose two memories are both still `active` (ids)."""
    return [(a, b, why) for a, b, why in _contested_raw(store) if a in active and b in active]
