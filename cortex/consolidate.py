"""Consolidation (`cortex consolidate`): merge near-duplicate memories into one, all or nothing.

Groups are memories of the same type, active and not pinned (code is never
consolidated), started by two memories that are each other's nearest
neighbour, every pair in a group at least the threshold similar
(`cortex.graph.Similarity`, the centred cosine): `consolidate.manual_threshold` (0.5)
for `cortex consolidate`, `consolidate.auto_threshold` (0.7) for the
automatic run, which takes only the pairs flagged when memories were written
and runs after capture once `consolidate.every_captures` (10) memories were
captured since the last run, or whenever more than `consolidate.max_active`
(80) memories are active.

A group becomes one new memory: the best-written member's text (highest
priority, then confidence, then the longest) plus the sentences only the
others hold — or, with `capture.llm` on and its command present, the LLM's
merged text (the LLM may also answer that they differ: the group is then not
merged); the union of tags, files and links; the highest priority and
confidence; `derived_from` links to every original. The originals are
archived.

All or nothing: the originals' bytes go to a checkpoint under
`state/consolidate-checkpoint/` first; every new and changed file is written
to a temporary file beside its target; then all are renamed. Any failure
restores the originals from the checkpoint and removes the new files, so
the store is never half-merged — and a run killed half-way is rolled back by
the next one (or by `cortex consolidate` itself).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from cortex import memory as fmt
from cortex.errors import CortexError
from cortex.files import atomic_write, file_lock
from cortex.graph import NO_LINK_TYPES, Similarity, clear_flags, flagged, words
from cortex.memory import Link, Memory
from cortex.store import Store

MAX_GROUP = 6
CHECKPOINT = "consolidate-checkpoint"


@dataclass
class Group:
    type: str
    members: list[Memory]
    similarity: float  # the lowest similarity between two members
    found: dict[Path, bytes] = field(default_factory=dict)  # each member's bytes when it was read

    @classmethod
    def read(cls, kind: str, paths: list[Path], similarity: float) -> Group:
        raw = {path: path.read_bytes() for path in paths}
        members = [fmt.parse(data.decode("utf-8"), path) for path, data in raw.items()]
        return cls(kind, members, similarity, raw)

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, "similarity": round(self.similarity, 3),
                "members": [{"id": m.id, "title": m.title} for m in self.members]}


@dataclass
class Result:
    groups: list[Group] = field(default_factory=list)
    merged: list[tuple[str, list[str]]] = field(default_factory=list)  # (new id, original ids)


# ---------------------------------------------------------------- finding groups


def _eligible(records: dict[str, dict[str, Any]], automatic: bool = False) -> dict[str, list[str]]:
    """Active, unpinned, non-code memories by type; the automatic run also leaves out memories capture keeps
    updating in place (a session's plan or progress, `source.key`): merged away, the next Stop would write them
    again."""
    by_type: dict[str, list[str]] = {}
    for rel, entry in records.items():
        if entry["status"] != "active" or entry["type"] in NO_LINK_TYPES:
            continue
        meta = json.loads(entry["meta"])
        if meta.get("pinned", False) or (automatic and (meta.get("source") or {}).get("key")):
            continue
        by_type.setdefault(entry["type"], []).append(rel)
    return by_type


def _neighbours(similarity: Similarity, rels: list[str], threshold: float, among: list[str] | None = None
                ) -> tuple[list[tuple[float, str, str]], dict[str, str]]:
    """Pairs of `rels` (with `among`, each of `rels` against `among`) at least `threshold` similar, best first,
    and each memory's nearest neighbour."""
    others = among if among is not None else rels
    pairs: dict[tuple[str, str], float] = {}
    nearest: dict[str, str] = {}
    if similarity.method == "cosine":
        import numpy as np

        mine, theirs = similarity.matrix_for(rels), similarity.matrix_for(others)
        if mine is None or theirs is None or not rels or not others:
            return [], {}
        position = {rel: k for k, rel in enumerate(others)}
        step = max(8, min(1024, 4_000_000 // max(1, len(others))))  # a block of ≤ 16 MB of scores
        for start in range(0, len(rels), step):
            block = mine[start:start + step] @ theirs.T
            for i in range(block.shape[0]):
                a = rels[start + i]
                if a in position:
                    block[i, position[a]] = -2.0  # not its own neighbour
            best = block.argmax(axis=1)
            for i, j in enumerate(best):
                if block[i, j] > -2.0:
                    nearest[rels[start + i]] = others[int(j)]
            for i, j in zip(*np.nonzero(block >= threshold)):
                a, b = rels[start + int(i)], others[int(j)]
                pairs[(min(a, b), max(a, b))] = float(block[i, j])
    else:
        for a in rels:
            candidates = [o for o in others if o != a]
            scores = similarity.against(a, candidates)
            if scores:
                nearest[a] = candidates[max(range(len(scores)), key=lambda k: scores[k])]
            for b, score in zip(candidates, scores):
                if score >= threshold:
                    pairs[(min(a, b), max(a, b))] = score
    ordered = sorted(((score, a, b) for (a, b), score in pairs.items()), key=lambda p: (-p[0], p[1], p[2]))
    return ordered, nearest


def _grow(pairs: list[tuple[float, str, str]], nearest: dict[str, str], similar: Callable[[str, str], float],
          threshold: float) -> list[tuple[list[str], float]]:
    """Groups from similar pairs, strictest first.

    A group starts from two memories that are each other's nearest neighbour
    (mutual nearest neighbours: a memory that merely shares a topic with
    several others is nobody's twin); another joins only if a member has it
    as nearest neighbour (so only after that member's own twin was placed
    elsewhere, in practice rarely) and it is similar enough to every member
    (complete linkage). A cluster of three copies therefore merges over two
    runs. Measured in bench/consolidate.py.
    """
    group_of: dict[str, int] = {}
    groups: list[list[str]] = []
    lowest: list[float] = []
    for score, a, b in pairs:
        ga, gb = group_of.get(a), group_of.get(b)
        if ga is None and gb is None:
            if nearest.get(a) == b and nearest.get(b) == a:
                group_of[a] = group_of[b] = len(groups)
                groups.append([a, b])
                lowest.append(score)
            continue
        if ga is not None and gb is not None:
            continue  # both placed: groups are not merged with each other
        g, newcomer = (ga, b) if ga is not None else (gb, a)
        assert g is not None
        if len(groups[g]) >= MAX_GROUP or not any(nearest.get(member) == newcomer for member in groups[g]):
            continue
        scores = [similar(newcomer, member) for member in groups[g]]
        if min(scores) >= threshold:
            groups[g].append(newcomer)
            group_of[newcomer] = g
            lowest[g] = min(lowest[g], *scores)
    return list(zip(groups, lowest))


def find_groups(store: Store, threshold: float | None = None, only_flagged: bool = False,
                similarity: Similarity | None = None) -> list[Group]:
    """Groups of near-duplicates, most similar first (`only_flagged`: from the pairs flagged at write time)."""
    if threshold is None:
        threshold = float(store.config().get("consolidate.manual_threshold"))
    similarity = similarity or Similarity(store)
    records = similarity.records()
    by_type = _eligible(records, automatic=only_flagged)
    rel_of = {entry["id"]: rel for rel, entry in records.items()}

    def similar(a: str, b: str) -> float:
        return similarity.against(a, [b])[0]

    found: list[tuple[list[str], float]] = []
    for kind, rels in sorted(by_type.items()):
        rels = sorted(rels)
        if only_flagged:
            eligible = set(rels)
            marked = sorted({rel for a_id, b_id, _score in flagged(store)
                             for rel in (rel_of.get(a_id), rel_of.get(b_id)) if rel in eligible})
            pairs, nearest = _neighbours(similarity, marked, threshold, among=rels)
            flagged_pairs = {tuple(sorted((rel_of.get(a) or "", rel_of.get(b) or ""))) for a, b, _ in flagged(store)}
            pairs = [p for p in pairs if (p[1], p[2]) in flagged_pairs]
        else:
            pairs, nearest = _neighbours(similarity, rels, threshold)
        found.extend(_grow(pairs, nearest, similar, threshold))
    root = store.memories_dir
    groups = []
    for rels, low in found:
        try:
            group = Group.read("", [root / rel for rel in sorted(rels)], low)
        except (OSError, UnicodeDecodeError, CortexError):
            continue  # changed under us since the cache saw it: the next run looks again
        group.type = group.members[0].type
        groups.append(group)
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


def _llm_merge(store: Store, group: Group) -> str | None:
    """The LLM's merged text when `capture.llm` allows it; None otherwise (see `cortex.worker.ask`)."""
    from cortex.worker import ask

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
    with store._lock(), file_lock(store.state_dir / "consolidate.lock"):
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
    # Undo only what the cut-off run left: a file changed since (a person edited the merged memory, say)
    # is never overwritten or deleted. Then the rollback stops and says which files to look at.
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
    import hashlib

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
    """Merge every group in one all-or-nothing step (see the module docstring).

    The merged texts (the LLM's included) are made before any lock is taken, so a slow LLM never holds up
    another writer; under the lock each member is read again, and a group whose member changed, moved or
    stopped being active since it was found (another run merged it, a person archived or edited it) is skipped.
    """
    from cortex.store import _guard

    result = Result(groups=[])
    if not groups:
        return result
    prepared = []
    for group in groups:
        snapshot = dict(group.found)  # the bytes the group was built from: any change since skips it
        if not snapshot:
            try:
                snapshot = {m.path: m.path.read_bytes() for m in group.members if m.path is not None}
            except OSError:
                continue
        llm_text = _llm_merge(store, group) if use_llm else None
        if llm_text is not None and _says_different(llm_text):
            store.log(f"consolidate: the LLM says {', '.join(m.id for m in group.members)} differ: not merged")
            continue  # a second opinion that vetoes a false merge
        if llm_text is not None and not llm_text.lstrip().lower().startswith("title:"):
            store.log("consolidate: the LLM's answer is not 'Title: …' then the text: merged without it")
            llm_text = None
        prepared.append((group, snapshot, merged_memory(group, llm_text)))
    with store._lock(), file_lock(store.state_dir / "consolidate.lock"):
        _recover_locked(store)
        existing = {p.name.rsplit("-", 1)[-1][:-3] for p in store.memory_paths()}
        stamp = fmt.now_iso()
        writes: list[tuple[Path, str]] = []  # (target, text)
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
            _guard(text, path)
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
        if not writes:
            return result
        folder = _checkpoint_dir(store)
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        saved = {}
        for n, (original_path, data) in enumerate(originals.items()):
            atomic_write(folder / f"{n}.md", data)
            saved[str(original_path)] = f"{n}.md"
        temps = [target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.tmp") for target, _ in writes]
        import hashlib

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
    clear_flags(store, [m.id for g in result.groups for m in g.members])
    store.log(f"consolidate: merged {sum(len(g.members) for g in result.groups)} memories into {len(result.groups)}")
    return result


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
    groups = find_groups(store, float(config.get("consolidate.auto_threshold")), only_flagged=True)
    return len(apply(store, groups).merged)
