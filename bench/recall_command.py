"""LoCoMo recall@10 through the `cortex recall` command (what a person runs), not the library.

    python bench/recall_command.py [--locomo ../shared/data/locomo/locomo10.json] [--convs 0-4] [--no-serve]

The stores are built as bench/retrieval.py builds them (one memory per dialog turn, read in place; LoCoMo is
never copied into the repository). Each question of categories 1-4 is asked as
`cortex recall QUESTION --json --limit 10 --dir STORE` in a subprocess, answered by a `cortex serve` started
per conversation (`--no-serve`: each command searches itself, much slower). recall@10 and MRR as
bench/retrieval.py defines them, over direct hits, and recall@1 and @3 the same way (the share of a question's
evidence in the top 1 or 3). The `cortex` run is the one on PATH beside this Python, so
`PYTHONPATH=<checkout>` picks the code measured. bench/retrieval.py gives the library's figure to compare.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.retrieval import CATEGORIES, DEFAULT_LOCOMO, build_store, load_conversation  # noqa: E402
from cortex import recall as recall_module  # noqa: E402
from cortex.index import Index  # noqa: E402

CORTEX = [str(Path(sys.executable).parent / "cortex")]


def _serve(folder: Path) -> subprocess.Popen[bytes]:
    """A `cortex serve` for the store, once it answers (its warm-up done)."""
    from cortex.serve import ask

    server = subprocess.Popen([*CORTEX, "serve", "--dir", str(folder), "--idle", "600"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while time.time() < deadline:
        answer = ask(str(folder), {"op": "ping"}, timeout=2.0) if (folder / "state").exists() else None
        if answer and answer.get("ready"):
            return server
        time.sleep(0.5)
    server.kill()
    raise SystemExit(f"cortex serve for {folder} did not get ready")


def run(data: list, convs: range, serve: bool) -> dict[str, float]:
    recall_module.use_contextual("inline")
    per: dict[int, list[tuple[float, float]]] = {}
    tops: list[tuple[float, ...]] = []  # the share of each question's evidence in the top 1 and the top 3
    empty = 0
    with tempfile.TemporaryDirectory() as tmp:
        for ci in convs:
            turns, questions = load_conversation(data[ci])
            folder = Path(tmp) / f"conv{ci}" / ".cortex"
            store, id_to_dia = build_store(folder, turns)
            index = Index(store)
            index.sync(full=True, progress=False)
            recall_module.fill_contextual(store, index)
            server = _serve(folder) if serve else None
            env = {**os.environ, "CORTEX_HOME": str(Path(tmp) / "home")}
            try:
                for question, evidence, category in questions:
                    done = subprocess.run([*CORTEX, "recall", question, "--json", "--limit", "10", "--dir",
                                           str(folder)], capture_output=True, text=True, env=env, timeout=300)
                    if done.returncode != 0:
                        raise SystemExit(f"cortex recall {question!r} exited {done.returncode}: {done.stderr}")
                    hits = json.loads(done.stdout)
                    empty += not hits
                    ranked = [id_to_dia[h["id"]] for h in hits if not h.get("via") and h["id"] in id_to_dia][:10]
                    found = len(evidence & set(ranked)) / len(evidence)
                    first = next((i for i, dia in enumerate(ranked, start=1) if dia in evidence), None)
                    per.setdefault(category, []).append((found, 1.0 / first if first else 0.0))
                    tops.append(tuple(len(evidence & set(ranked[:k])) / len(evidence) for k in (1, 3)))
            finally:
                if server is not None:
                    server.terminate()
                    server.wait(30)
    rows = [r for values in per.values() for r in values]
    out = {"recall@1": 100 * sum(t[0] for t in tops) / len(tops), "recall@3": 100 * sum(t[1] for t in tops) / len(tops),
           "recall@10": 100 * sum(r for r, _ in rows) / len(rows), "mrr": sum(m for _, m in rows) / len(rows),
           "questions": len(rows), "empty answers": empty}
    for category, label in CATEGORIES.items():
        values = per.get(category, [])
        out[label] = 100 * sum(r for r, _ in values) / len(values) if values else 0.0
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description="LoCoMo recall@10 through the cortex recall command")
    parser.add_argument("--locomo", type=Path, default=DEFAULT_LOCOMO)
    parser.add_argument("--convs", default="0-4", help="conversation indices, e.g. 0-4")
    parser.add_argument("--no-serve", action="store_true", help="no cortex serve: each command searches itself")
    args = parser.parse_args()
    lo, hi = (int(x) for x in args.convs.split("-"))
    data = json.loads(args.locomo.read_text(encoding="utf-8"))
    started = time.perf_counter()
    result = run(data, range(lo, hi + 1), not args.no_serve)
    print(json.dumps({"convs": args.convs, "seconds": round(time.perf_counter() - started), **result}, indent=2))


if __name__ == "__main__":
    main()
