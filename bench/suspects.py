"""The suspects queue on a KnowledgeDrift world's planted pairs, without a full replay.

    PYTHONPATH=. python bench/suspects.py WORLD.json [--pairs-only] [--show N] [--keep DIR] [--grader PATH]

A KnowledgeDrift v2 world (docs/knowledgedrift.md) plants contradiction cases (a note beside the fact it
contradicts, or beside one it only seems to: a paraphrase, a synonym, a unit conversion, a different subject, a
history) and drift (a stale sibling imported beside the fact, never linked). This replays the world's writes up
to its `suspects` operation into a fresh store through the library (memories, `because` links, supersessions),
then asks the queue (`cortex.suspects.find`) and counts, per case shape, the real pairs raised and the false
alarms, and how many other pairs the queue holds. `--pairs-only` skips the store: the pair check alone
(`cortex.claims.contradiction`, or `conflict` where a checkout has no `contradiction`) on each planted pair,
the figure to compare with an older checkout (run it with that checkout on PYTHONPATH). `--grader` also
grades the queue's pairs with the benchmark's own grader (its contradiction and drift families only).

Seed 1 is the benchmark's held-out figure and is refused.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

TYPE_OF = {"Decision": "decision", "Caution": "gotcha", "Principle": "pattern", "Problem": "context",
           "Insight": "context"}


def planted(world: dict[str, Any]) -> tuple[dict[str, dict[str, Any]], list[tuple[str, ...]], list[Any]]:
    """(the records written before the queue is asked, by key; the ops before it; each planted pair as
    (family, shape, positive, a, b))."""
    ops = world["ops"]
    stop = next(n for n, op in enumerate(ops) if op["op"] == "suspects")
    records: dict[str, dict[str, Any]] = {}
    for op in ops[:stop]:
        if op["op"] == "inscribe":
            records[op["record"]["key"]] = op["record"]
        elif op["op"] == "supersede":
            records[op["new"]["key"]] = op["new"]
    pairs = []
    for probe in world["probes"]:
        if probe["family"] == "contradiction":
            pairs.append(("contradiction", probe["shape"], probe["positive"], probe["witness"], probe["gold"]))
        elif probe["family"] == "drift":
            pairs.append(("drift", "drift", True, probe["stale"], probe["gold"]))
    return records, ops[:stop], pairs


def text_of(record: dict[str, Any]) -> str:
    return f"{record['title']}\n{record['body']}"


def tally(pairs: list[Any], raised: Any) -> dict[str, Counter[str]]:
    by_shape: dict[str, Counter[str]] = {}
    for family, shape, positive, a, b in pairs:
        count = by_shape.setdefault(shape, Counter())
        count["posed"] += 1
        count["positive" if positive else "negative"] += 1
        if raised(a, b):
            count["found" if positive else "false_alarm"] += 1
    return by_shape


def report(by_shape: dict[str, Counter[str]], extra: int | None = None) -> None:
    total: Counter[str] = Counter()
    for shape, count in sorted(by_shape.items()):
        total.update(count)
        kind = f"{count['found']} of {count['positive']} found" if count["positive"] else \
            f"{count['false_alarm']} of {count['negative']} false alarms"
        print(f"  {shape:12} {kind}")
    print(f"real pairs found {total['found']} of {total['positive']}; "
          f"false alarms {total['false_alarm']} of {total['negative']}")
    if extra is not None:
        print(f"other pairs in the queue (no planted pair): {extra}")


def pairs_only(records: dict[str, dict[str, Any]], pairs: list[Any], show: int) -> None:
    from cortex import claims

    check = getattr(claims, "contradiction", None) or claims.conflict
    print(f"pair check: cortex.claims.{check.__name__}")
    shown = Counter[str]()

    def raised(a: str, b: str) -> bool:
        reason = check(text_of(records[a]), text_of(records[b]))
        return reason is not None

    by_shape = tally(pairs, raised)
    report(by_shape)
    for family, shape, positive, a, b in pairs:
        if show and shown[shape] < show and raised(a, b) != positive:
            shown[shape] += 1
            print(f"  {'MISSED' if positive else 'FALSE'} {shape}: {records[a]['title'][:110]!r}\n"
                  f"      vs {records[b]['title'][:110]!r}: {check(text_of(records[a]), text_of(records[b]))}")


def build(dest: Path, ops: list[Any]) -> tuple[Any, dict[str, str]]:
    """A store of the world's writes before the queue (through the library: the same files `remember` makes)."""
    from cortex import memory as fmt
    from cortex.memory import Link, Memory
    from cortex.store import Store

    store = Store.init(dest / ".cortex")
    ids: dict[str, str] = {}

    def write(record: dict[str, Any]) -> str:
        created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(record.get("created_at") or 0)))
        item = Memory(id=fmt.new_id(), type=TYPE_OF.get(record["kind"], "context"), title=record["title"][:200],
                      body=record["body"] + "\n", created=created, updated=created,
                      files=list(dict.fromkeys(record.get("code_refs") or [])))
        made = store.create(item)
        ids[record["key"]] = made.id
        return made.id

    for op in ops:
        if op["op"] == "inscribe":
            write(op["record"])
        elif op["op"] == "supersede":
            new = write(op["new"])
            store.supersede(ids[op["old"]], new)
        elif op["op"] == "link" and op["verb"] in ("because", "answers"):
            a, b = (op["to"], op["from"]) if op["verb"] == "answers" else (op["from"], op["to"])
            store.add_links(ids[a], [Link("because", ids[b])])
        elif op["op"] == "release":
            store.archive(ids[op["key"]])
        elif op["op"] == "purge":
            store.delete([ids[op["key"]]])
    return store, ids


def grade(world_path: Path, world: dict[str, Any], raised: list[dict[str, str]], grader: Path) -> None:
    """The grader's own contradiction and drift families on the queue's pairs: a transcript answering the
    `suspects` operation with them and every other question with nothing (the other families mean nothing here)."""
    from bench.knowledgedrift import CAPABILITIES

    replies: list[dict[str, Any]] = []
    for op in world["ops"]:
        if op["op"] in ("recall", "recall_path"):
            replies.append({"reply": "recall", "id": op["id"], "result": {"hits": []}})
        elif op["op"] == "inscribe" and op.get("id"):
            replies.append({"reply": "inscribe", "id": op["id"], "result": {}})
        elif op["op"] == "lineage":
            replies.append({"reply": "lineage", "id": op["id"], "keys": []})
        elif op["op"] == "suspects":
            replies.append({"reply": "suspects", "id": op["id"], "pairs": raised})
    with tempfile.TemporaryDirectory(prefix="cortex-suspects-grade-") as folder:
        transcript = Path(folder) / "transcript.json"
        transcript.write_text(json.dumps({"arm": "cortex suspects only", "capabilities": CAPABILITIES,
                                          "standing_tokens": 0, "script_digest": world["digest"],
                                          "replies": replies}))
        done = subprocess.run([str(grader), "--grade", str(transcript), "--script", str(world_path)],
                              capture_output=True, text=True)
    lines = [line.strip() for line in done.stdout.splitlines() if line.strip().startswith(("contradiction", "drift"))]
    print("grader: " + ("\n        ".join(lines) if lines else (done.stderr or done.stdout).strip()[:300]))


def queue(ops: list[Any], pairs: list[Any], keep: Path | None) -> list[dict[str, str]]:
    from cortex import suspects
    from cortex.index import Index

    work = keep or Path(tempfile.mkdtemp(prefix="cortex-suspects-"))
    try:
        began = time.monotonic()
        if (work / "ids.json").is_file():  # a store kept by an earlier --keep: ask its queue again
            from cortex.store import Store

            store, ids = Store(work / ".cortex"), json.loads((work / "ids.json").read_text())
        else:
            store, ids = build(work, ops)
            (work / "ids.json").write_text(json.dumps(ids))
        index = Index(store).ensure()  # the queue needs no vectors
        print(f"store: {len(ids)} memories written and indexed in {time.monotonic() - began:.0f}s")
        began = time.monotonic()
        found = suspects.find(store, index)
        print(f"queue: {len(found)} pairs in {time.monotonic() - began:.1f}s")
        key_of = {memory_id: key for key, memory_id in ids.items()}
        raised = {frozenset((key_of.get(s.a, s.a), key_of.get(s.b, s.b))) for s in found}
        by_shape = tally(pairs, lambda a, b: frozenset((a, b)) in raised)
        known = {frozenset((a, b)) for *_rest, a, b in pairs}
        report(by_shape, len(raised - known))
        return [{"a": key_of.get(s.a, s.a), "b": key_of.get(s.b, s.b), "hint": s.kind} for s in found]
    finally:
        if keep is None:
            shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench/suspects.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("world", type=Path, help="an exported KnowledgeDrift v2 world (not seed 1)")
    parser.add_argument("--pairs-only", action="store_true", help="the pair check on each planted pair, no store")
    parser.add_argument("--grader", type=Path, help="the KnowledgeDrift grader binary: also print its contradiction "
                                                    "and drift families on the queue's pairs")
    parser.add_argument("--show", type=int, default=0, help="print up to N misses and false alarms per shape")
    parser.add_argument("--keep", type=Path, help="build the store in this folder and keep it (a folder kept "
                                                  "earlier is reused as it is)")
    args = parser.parse_args(argv)
    world = json.loads(args.world.read_text())
    if world["spec"].get("seed") == 1:
        print("bench/suspects.py: seed 1 is the held-out figure", file=sys.stderr)
        return 2
    records, ops, pairs = planted(world)
    print(f"{args.world.name}: {sum(p[2] for p in pairs)} real pairs, {sum(not p[2] for p in pairs)} look-alikes")
    if args.pairs_only:
        pairs_only(records, pairs, args.show)
    else:
        raised = queue(ops, pairs, args.keep)
        if args.grader is not None:
            grade(args.world, world, raised, args.grader)
    return 0


if __name__ == "__main__":
    sys.exit(main())
