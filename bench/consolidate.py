"""Consolidation quality and time: 1,000 memories holding 100 planted near-duplicate pairs (paraphrases).

    python bench/consolidate.py [--data FILE ...] [--long K]

Two data sets, both written for cortex: bench/data/consolidate.json (100
pairs of memories that say the same thing in different words and 800
distinct memories on the same topics, many of them near misses: the same
tool, a different decision), on which the duplicate score was designed and
its thresholds chosen; and bench/data/consolidate-heldout.json (50 pairs,
400 distinct memories, six other projects), written afterwards and never
tuned on. For each score (cortex's duplicate score; for comparison the
static model's centred and raw cosine and word overlap used alone) and
threshold it prints how many planted pairs consolidation groups together
(found), how many groups join memories that are not one planted pair (false
merges), and the time of `find_groups`. Then the automatic run as it happens
in use: every memory linked and flagged by graph.connect, the flagged pairs
judged at consolidate.auto_threshold. For the first data set it also times
the all-or-nothing merge of every group found at the manual threshold and a
whole `cortex consolidate --dry-run` process, without and with the scores
kept from an earlier run. With `--long K`, the same on memories of K of the
sets' sentences (`longer`), longer than the duplicate score's window.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.store import bench_env, print_machine, warm_bytecode  # noqa: E402
from cortex import consolidate  # noqa: E402
from cortex import memory as fmt  # noqa: E402
from cortex.graph import Similarity, connect, flagged  # noqa: E402
from cortex.index import Index  # noqa: E402
from cortex.memory import Memory  # noqa: E402
from cortex.store import Store  # noqa: E402

HERE = Path(__file__).resolve().parent


def build(dest: Path, data: dict) -> tuple[Store, dict[str, str]]:
    """A store of every pair member and background memory; returns it and each pair member's partner."""
    store = Store.init(dest)
    partner: dict[str, str] = {}
    n = 0

    def write(kind: str, text: str) -> str:
        nonlocal n
        n += 1
        item = Memory(id=f"{n:011x}a", type=kind, title=fmt.title_from_text(text), body=text + "\n",
                      created="2026-11-01T12:00:00Z", updated="2026-11-01T12:00:00Z")
        path = store.memories_dir / kind / fmt.file_name(item)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(fmt.render_new(item), encoding="utf-8")
        return item.id

    for pair in data["pairs"]:
        a, b = write(pair["type"], pair["a"]), write(pair["type"], pair["b"])
        partner[a], partner[b] = b, a
    for item in data["background"]:
        write(item["type"], item["text"])
    return store, partner


def score(groups: list[consolidate.Group], partner: dict[str, str]) -> tuple[int, int]:
    """(planted pairs found together, groups that join memories which are not one planted pair)."""
    found = 0
    false = 0
    for group in groups:
        ids = [m.id for m in group.members]
        pairs_inside = {tuple(sorted((i, partner[i]))) for i in ids if i in partner and partner[i] in ids}
        found += len(pairs_inside)
        if len(ids) != 2 * len(pairs_inside):
            false += 1
    return found, false


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, nargs="+",
                        default=[HERE / "data" / "consolidate.json", HERE / "data" / "consolidate-heldout.json"])
    parser.add_argument("--long", type=int, metavar="K", help="instead, memories of K sentences each (see `longer`)")
    args = parser.parse_args()
    warm_bytecode()
    print_machine(bench_env(), 3)
    for path in args.data:
        data = json.loads(path.read_text(encoding="utf-8"))
        print(f"\n== {path.name}" + (f", memories of {args.long} sentences" if args.long else ""))
        run(longer(data, args.long) if args.long else data, full=path == args.data[0] and not args.long)


def longer(data: dict, k: int) -> dict:
    """Memories over the judge's window: K planted pairs of one type joined sentence by sentence make a planted
    pair; near misses (background) share its first or its last half with it; the rest is K background texts."""
    rng = random.Random(7)
    out: dict = {"pairs": [], "background": []}
    background: dict[str, list[str]] = {}
    for item in data["background"]:
        background.setdefault(item["type"], []).append(item["text"])
    for kind in sorted({pair["type"] for pair in data["pairs"]}):
        pairs = [pair for pair in data["pairs"] if pair["type"] == kind]
        rest = background.get(kind, [])
        rng.shuffle(pairs)
        rng.shuffle(rest)
        half = k // 2
        for start in range(0, len(pairs) - k + 1, k):
            chunk = pairs[start:start + k]
            out["pairs"].append({"type": kind, **{side: " ".join(p[side] for p in chunk) for side in ("a", "b")}})
            if len(rest) >= 2 * k:
                opening = [p["b"] for p in chunk[:half]] + [rest.pop() for _ in range(k - half)]
                ending = [rest.pop() for _ in range(k - half)] + [p["b"] for p in chunk[half:]]
                out["background"] += [{"type": kind, "text": " ".join(part)} for part in (opening, ending)]
        out["background"] += [{"type": kind, "text": " ".join(rest[n:n + k])} for n in range(0, len(rest) - k + 1, k)]
    return out


def run(data: dict, full: bool) -> None:
    total = 2 * len(data["pairs"]) + len(data["background"])
    print(f"\n{total} memories, {len(data['pairs'])} planted pairs\n")
    with tempfile.TemporaryDirectory() as tmp:
        store, partner = build(Path(tmp) / "project" / ".cortex", data)
        Index(store).sync(full=True, progress=False)
        print(f"{'score':<16} {'threshold':>9} {'found':>7} {'false merges':>13} {'find_groups':>12}")
        rels = sorted(rel for rel, e in Index(store).records().items() if e["status"] == "active")
        started = time.perf_counter()
        judge = consolidate.Judge(store, rels)
        setup = time.perf_counter() - started
        for label, kwargs, referee in (("duplicate score", {}, judge), ("centred cosine", {}, False),
                                       ("raw cosine", {"centred": False}, False),
                                       ("word overlap", {"method": "jaccard"}, False)):
            thresholds = {"duplicate score": (0.5, 0.55, 0.6, 0.62, 0.64, 0.66, 0.68, 0.7, 0.75),
                          "centred cosine": (0.5, 0.6, 0.7), "raw cosine": (0.7, 0.8, 0.9),
                          "word overlap": (0.3, 0.4, 0.5)}[label]
            for threshold in thresholds:
                started = time.perf_counter()
                groups = consolidate.find_groups(store, threshold, similarity=Similarity(store, **kwargs),
                                                 judge=referee)
                took = time.perf_counter() - started
                found, false = score(groups, partner)
                print(f"{label:<16} {threshold:>9.2f} {found:>4}/{len(partner) // 2:<3} {false:>13} "
                      f"{took * 1000:>9.0f} ms")
        print(f"\n(the duplicate score's first call includes encoding the candidates: "
              f"{judge.encoded_count} memories; the judge's set-up, idf over {len(rels)} memories: {setup * 1000:.0f} ms)")
        config = store.config()
        manual = float(config.get("consolidate.manual_threshold"))
        auto = float(config.get("consolidate.auto_threshold"))
        copy = Path(tmp) / "copy" / ".cortex"
        shutil.copytree(store.root, copy)
        flagged_store = Store(copy)
        (flagged_store.cache_dir / consolidate.Judge.CACHE).unlink(missing_ok=True)  # judged from scratch
        started = time.perf_counter()
        connect(flagged_store, [e["id"] for e in Index(flagged_store).records().values()])
        flag_ms = (time.perf_counter() - started) * 1000
        started = time.perf_counter()
        groups = consolidate.find_groups(flagged_store, auto, only_flagged=True)
        auto_ms = (time.perf_counter() - started) * 1000
        found, false = score(groups, partner)
        print(f"automatic run (pairs flagged by graph.connect as each memory is written, at {auto}): "
              f"{found}/{len(partner) // 2} found, {false} false merges; {len(flagged(flagged_store))} pairs flagged "
              f"(linking and flagging all {len(rels)}: {flag_ms:.0f} ms), judged in {auto_ms:.0f} ms")
        if not full:
            return
        shutil.rmtree(copy.parent)
        shutil.copytree(store.root, copy)
        started = time.perf_counter()
        result = consolidate.apply(Store(copy), [g for g in consolidate.find_groups(Store(copy), manual)], use_llm=False)
        merge_ms = (time.perf_counter() - started) * 1000
        print(f"\nmerge of the {len(result.merged)} groups found at {manual} (all or nothing, find included): "
              f"{merge_ms:.0f} ms")
        cortex = Path(sys.executable).parent / "cortex"
        (store.cache_dir / consolidate.Judge.CACHE).unlink()
        started = time.perf_counter()
        subprocess.run([str(cortex), "consolidate", "--dry-run", "--dir", str(store.root)], check=True,
                       capture_output=True, env=bench_env())
        print(f"`cortex consolidate --dry-run`, whole process, no duplicate score kept yet: "
              f"{(time.perf_counter() - started) * 1000:.0f} ms")
        runs = []
        for _ in range(5):
            started = time.perf_counter()
            subprocess.run([str(cortex), "consolidate", "--dry-run", "--dir", str(store.root)], check=True,
                           capture_output=True, env=bench_env())
            runs.append(time.perf_counter() - started)
        print(f"`cortex consolidate --dry-run`, whole process, the scores kept, median of 5: "
              f"{statistics.median(runs) * 1000:.0f} ms")


if __name__ == "__main__":
    main()
