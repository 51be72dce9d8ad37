"""Consolidation and claims: pairs of memories that differ in one claim must never merge; paraphrases should.

    python bench/consolidate_claims.py [--data FILE]

bench/data/consolidate-claims.json holds 120 pairs that differ in one claim
(30 each: a number, a name, a version, a negation; most read alike but for
that claim, some are reworded too) and 40 pairs that say one thing in other
words, often with the numbers written differently ("3" / "three", "5
minutes" / "300 seconds", "1,000" / "1k"). They are put in one store with
the 800 distinct memories of bench/data/consolidate.json (the same
subjects: payments, web app, mobile backend, pipeline, infra, a CLI) and
consolidated three ways, each with the claim check (cortex) and without it
(`conflicts="allow"`, what `--allow-conflicts` does): by hand at
consolidate.manual_threshold, the same groups at consolidate.auto_threshold,
and the automatic run as it happens in use (every memory linked and flagged
by graph.connect, the flagged pairs judged at consolidate.auto_threshold).
It prints how many differing pairs were merged (the goal is 0), how many
paraphrase pairs were, and groups joining memories of different planted
pairs or background memories (false merges). Then the claim checker alone
(`cortex.claims.conflict`) on every planted pair here and on the paraphrase
pairs of consolidate.json and consolidate-heldout.json, and whether each
merged memory keeps every claim of its members.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.store import bench_env, print_machine, warm_bytecode  # noqa: E402
from cortex import claims as claims_module  # noqa: E402
from cortex import consolidate  # noqa: E402
from cortex import memory as fmt  # noqa: E402
from cortex.graph import connect  # noqa: E402
from cortex.index import Index  # noqa: E402
from cortex.memory import Memory  # noqa: E402
from cortex.store import Store  # noqa: E402

HERE = Path(__file__).resolve().parent


def build(dest: Path, data: dict, background: list[dict]) -> tuple[Store, dict[str, tuple[str, str]]]:
    """A store of every planted pair and the background; returns it and, for each planted memory, (pair key, kind)."""
    store = Store.init(dest)
    planted: dict[str, tuple[str, str]] = {}
    n = 0

    def write(kind: str, text: str) -> str:
        nonlocal n
        n += 1
        item = Memory(id=f"{n:011x}c", type=kind, title=fmt.title_from_text(text), body=text + "\n",
                      created="2026-11-01T12:00:00Z", updated="2026-11-01T12:00:00Z")
        path = store.memories_dir / kind / fmt.file_name(item)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(fmt.render_new(item), encoding="utf-8")
        return item.id

    rows = [(f"differ-{k}", p["kind"], p) for k, p in enumerate(data["differ"])] + \
        [(f"same-{k}", "paraphrase", p) for k, p in enumerate(data["paraphrases"])]
    for key, kind, pair in rows:
        for text in (pair["a"], pair["b"]):
            planted[write(pair["type"], text)] = (key, kind)
    for item in background:
        write(item["type"], item["text"])
    return store, planted


def tally(groups: list[consolidate.Group], planted: dict[str, tuple[str, str]]) -> tuple[Counter[str], int]:
    """(planted pairs merged by kind, groups that join memories not of one planted pair)."""
    merged: Counter[str] = Counter()
    false = 0
    for group in groups:
        keys = {planted.get(m.id, ("background", ""))[0] for m in group.members}
        if len(keys) != 1 or "background" in keys:
            false += 1
            continue
        merged[planted[group.members[0].id][1]] += 1
    return merged, false


def line(label: str, merged: Counter[str], false: int, totals: Counter[str], took: float) -> str:
    differ = sum(v for k, v in merged.items() if k != "paraphrase")
    kinds = " ".join(f"{k} {merged[k]}" for k in ("number", "name", "version", "negation"))
    return (f"{label:<44} {differ:>3}/{sum(v for k, v in totals.items() if k != 'paraphrase'):<4} ({kinds})"
            f"  {merged['paraphrase']:>3}/{totals['paraphrase']:<3} {false:>6}  {took * 1000:>6.0f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=HERE / "data" / "consolidate-claims.json")
    args = parser.parse_args()
    warm_bytecode()
    print_machine(bench_env(), 3)
    data = json.loads(args.data.read_text(encoding="utf-8"))
    tuning = json.loads((HERE / "data" / "consolidate.json").read_text(encoding="utf-8"))
    heldout = json.loads((HERE / "data" / "consolidate-heldout.json").read_text(encoding="utf-8"))
    totals = Counter(p["kind"] for p in data["differ"]) + Counter({"paraphrase": len(data["paraphrases"])})

    print("\n== the claim checker alone (cortex.claims.conflict)")
    called = Counter(p["kind"] for p in data["differ"] if claims_module.conflict(p["a"], p["b"]))
    print("differing pairs it calls conflicting: " + ", ".join(f"{k} {called[k]}/{totals[k]}"
                                                              for k in ("number", "name", "version", "negation")))
    for name, pairs in ((args.data.name, data["paraphrases"]), ("consolidate.json", tuning["pairs"]),
                        ("consolidate-heldout.json", heldout["pairs"])):
        wrong = [(p, claims_module.conflict(p["a"], p["b"])) for p in pairs]
        wrong = [(p, reason) for p, reason in wrong if reason]
        print(f"paraphrase pairs it calls conflicting, {name}: {len(wrong)}/{len(pairs)}")
        for pair, reason in wrong:
            print(f"    {reason}: {pair['a'][:60]}… / {pair['b'][:60]}…")
    started = time.perf_counter()
    texts = [p[side] for p in data["differ"] + data["paraphrases"] for side in ("a", "b")] * 5
    for text in texts:
        claims_module.claims(text)
    print(f"claims(): {(time.perf_counter() - started) / len(texts) * 1e6:.0f} µs a memory")

    with tempfile.TemporaryDirectory() as tmp:
        store, planted = build(Path(tmp) / "project" / ".cortex", data, tuning["background"])
        Index(store).sync(full=True, progress=False)
        config = store.config()
        manual = float(config.get("consolidate.manual_threshold"))
        auto = float(config.get("consolidate.auto_threshold"))
        total = len(planted) + len(tuning["background"])
        print(f"\n== consolidation: {total} memories, {len(data['differ'])} differing pairs, "
              f"{len(data['paraphrases'])} paraphrase pairs\n")
        print(f"{'run':<44} {'differing pairs merged':<36} {'paraphrases':<9} {'false':>6}  {'time':>9}")
        for threshold in (manual, auto):
            for label, mode in (("claim check", "skip"), ("no claim check (--allow-conflicts)", "allow")):
                started = time.perf_counter()
                groups = consolidate.find_groups(store, threshold, conflicts=mode)
                took = time.perf_counter() - started
                merged, false = tally(groups, planted)
                print(line(f"by hand at {threshold}, {label}", merged, false, totals, took))
        copy = Path(tmp) / "copy" / ".cortex"
        shutil.copytree(store.root, copy)
        flagged_store = Store(copy)
        connect(flagged_store, [e["id"] for e in Index(flagged_store).records().values()])
        for label, mode in (("claim check", "skip"), ("no claim check", "allow")):
            started = time.perf_counter()
            groups = consolidate.find_groups(flagged_store, auto, only_flagged=True, conflicts=mode)
            took = time.perf_counter() - started
            merged, false = tally(groups, planted)
            print(line(f"automatic run at {auto}, {label}", merged, false, totals, took))
        groups = consolidate.find_groups(store, auto)
        print(f"\ngroups at {auto} that join memories of different planted pairs or background memories:")
        for group in groups:
            keys = {planted.get(m.id, ("background", ""))[0] for m in group.members}
            if len(keys) != 1 or "background" in keys:
                print("    " + " / ".join(f"{m.body.strip()[:55]}…" for m in group.members))
        shown = consolidate.find_groups(store, manual, conflicts="show")
        asked = [g for g in shown if g.conflict]
        print(f"\n`cortex consolidate` at {manual} shows {len(asked)} pairs that differ in a claim, to merge only "
              f"on a person's yes (never with --yes alone)")
        for group in asked[:6]:
            print(f"    {group.conflict}: {group.members[0].title[:50]}… / {group.members[1].title[:50]}…")

        print("\n== merged text (by hand at the manual threshold, claim check on)")
        groups = consolidate.find_groups(store, manual)
        complete = grew = 0
        for group in groups:
            merged_memory = consolidate.merged_memory(group)
            kept = claims_module.claims(f"{merged_memory.title}\n{merged_memory.body}")
            best = max(group.members, key=lambda m: (m.priority, m.confidence, len(m.body.strip()), m.id))
            members = [claims_module.claims(f"{m.title}\n{m.body}") for m in group.members]
            if all(claims_module.present(item, kept) for said in members for item in said.items
                   if not (item.kind == "name" and item.initial)):
                complete += 1
            grew += merged_memory.body.strip() != best.body.strip()
        print(f"{complete}/{len(groups)} merged memories hold every claim of their members; "
              f"{grew} hold more than the best-written member's text")


if __name__ == "__main__":
    main()
