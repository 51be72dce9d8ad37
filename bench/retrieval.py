"""Retrieval quality on LoCoMo through cortex's real recall path (the standard harness definition).

    python bench/retrieval.py [--locomo ../shared/data/locomo/locomo10.json] [--convs 0-4] [--only 1,4,5]
                              [--no-sessions] [--json]

Each dialog turn of a conversation becomes one memory file in a fresh store
per conversation: title its first sentence, body "speaker: text" (plus the
image caption when there is one) and the session's date, `created` that
date, `source.session` its session as capture records one (`--no-sessions`
leaves it out: recall then cannot lift the best hit's session). Each
question of categories 1-4 (multi-hop, temporal, open-domain, single-hop;
the adversarial category 5 has no answer to find) with evidence is a query
over its own conversation. The harness definition: **recall@10**
is the share of a question's evidence turns in the top 10 (averaged over
questions, ×100), **MRR** the reciprocal rank of the first evidence turn.
Direct hits only (linked hits are not counted; the stores have no links),
and the narrowing of broad queries to 3 hits is off: it is a display limit
(a question naming a speaker matches half of the turns), not the ranking.

Rows: BM25 alone, the bundled static model alone, the contextual model
alone, the hybrid of BM25 + static (cortex before the contextual model, and
still what a one-shot hook uses), and the re-ranked recall `cortex serve`,
the MCP server and `cortex recall` use (BM25 + static + contextual fused,
then re-ranked by the contextual match). The same `recall_store` code, only
`methods` differ. LoCoMo (CC BY-NC 4.0) is read in place, never copied into
the repository; tune on conversations 0-4 only.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cortex import memory as fmt  # noqa: E402
from cortex import recall as recall_module  # noqa: E402
from cortex.index import Index  # noqa: E402
from cortex.memory import Memory  # noqa: E402
from cortex.recall import recall_store  # noqa: E402
from cortex.store import Store  # noqa: E402

DEFAULT_LOCOMO = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo" / "locomo10.json"
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
VARIANTS = {
    "BM25 (Whoosh BM25F)": ("bm25",),
    "static model alone": ("dense",),
    "contextual model alone": ("ctx",),
    "hybrid BM25 + static (one-shot hook)": ("bm25", "dense"),
    "re-ranked (serve, MCP, cortex recall)": ("bm25", "dense", "ctx"),
}


def _dia(raw: str) -> str | None:
    match = re.match(r"D(\d+):(\d+)", raw)
    return f"D{int(match.group(1))}:{int(match.group(2))}" if match else None


def _date(text: str) -> str:
    """LoCoMo's "1:56 pm on 8 May, 2023" as ISO 8601 (the epoch when it does not parse)."""
    try:
        return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=timezone.utc).strftime(
            "%Y-%m-%dT%H:%M:%SZ")
    except ValueError:
        return "2023-01-01T00:00:00Z"


def load_conversation(sample: dict) -> tuple[list[tuple[str, str, str, str]], list[tuple[str, set[str], int]]]:
    """(turns as (dia_id, speaker, text, session date), questions as (question, evidence ids, category))."""
    conv = sample["conversation"]
    sessions = sorted((k for k in conv if re.fullmatch(r"session_\d+", k) and isinstance(conv[k], list)),
                      key=lambda k: int(k.split("_")[1]))
    turns = []
    for key in sessions:
        date = str(conv.get(f"{key}_date_time", ""))
        for turn in conv[key]:
            text = turn.get("text", "")
            if turn.get("blip_caption"):
                text = f"{text} [image: {turn['blip_caption']}]"
            turns.append((_dia(turn["dia_id"]) or turn["dia_id"], turn.get("speaker", ""), text, date))
    known = {t[0] for t in turns}
    questions = []
    for qa in sample["qa"]:
        if qa.get("category") not in CATEGORIES:
            continue
        evidence = {d for raw in qa.get("evidence") or [] for d in map(_dia, re.findall(r"D\d+:\d+", raw)) if d in known}
        if evidence:
            questions.append((qa["question"], evidence, int(qa["category"])))
    return turns, questions


def build_store(folder: Path, turns: list[tuple[str, str, str, str]], sessions: bool = True
                ) -> tuple[Store, dict[str, str]]:
    store = Store.init(folder)
    id_to_dia = {}
    for n, (dia, speaker, text, date) in enumerate(turns):
        when = _date(date)
        # Recorded as cortex capture records a memory: the session it came from (`source.session`).
        session = f"{folder.parent.name}-{dia.split(':')[0]}"
        item = Memory(id=f"{n + 0xa00000000000:012x}", type="context", title=fmt.title_from_text(text) or dia,
                      body=f"{speaker}: {text}\n\n({date})\n", created=when, updated=when, confidence=0.8, priority=5,
                      source={"kind": "transcript", "session": session} if sessions else {})
        path = store.memories_dir / "context" / fmt.file_name(item)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(fmt.render_new(item), encoding="utf-8")
        id_to_dia[item.id] = dia
    return store, id_to_dia


def evaluate(store: Store, index: Index, id_to_dia: dict[str, str], questions, methods) -> dict[int, list[tuple[float, float]]]:
    """category -> (recall@10, reciprocal rank) of each question."""
    out: dict[int, list[tuple[float, float]]] = {}
    for question, evidence, category in questions:
        hits = recall_store(store, question, limit=10, index=index, sync=False, methods=methods, now=0,
                            narrow=False).hits
        ranked = [id_to_dia[h.memory.id] for h in hits if h.via is None][:10]
        found = len(evidence & set(ranked)) / len(evidence)
        first = next((i for i, dia in enumerate(ranked, start=1) if dia in evidence), None)
        out.setdefault(category, []).append((found, 1.0 / first if first else 0.0))
    return out


def run(data: list, convs: range, variants: dict[str, tuple[str, ...]], sessions: bool = True
        ) -> dict[str, dict[str, float]]:
    per: dict[str, dict[int, list[tuple[float, float]]]] = {name: {} for name in variants}
    recall_module.use_contextual("inline")  # the ranking is measured, not the narrowing of broad queries
    with tempfile.TemporaryDirectory() as tmp:
        for ci in convs:
            turns, questions = load_conversation(data[ci])
            store, id_to_dia = build_store(Path(tmp) / f"conv{ci}" / ".cortex", turns, sessions)
            index = Index(store)
            index.sync(full=True, progress=False)
            recall_module.fill_contextual(store, index)
            for name, methods in variants.items():
                for category, rows in evaluate(store, index, id_to_dia, questions, methods).items():
                    per[name].setdefault(category, []).extend(rows)
    table = {}
    for name, by_cat in per.items():
        rows = [r for values in by_cat.values() for r in values]
        entry = {"recall@10": 100 * sum(r for r, _ in rows) / len(rows), "mrr": sum(m for _, m in rows) / len(rows),
                 "questions": len(rows)}
        for category, label in CATEGORIES.items():
            values = by_cat.get(category, [])
            entry[label] = 100 * sum(r for r, _ in values) / len(values) if values else 0.0
        table[name] = entry
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description="LoCoMo retrieval through cortex recall")
    parser.add_argument("--locomo", type=Path, default=DEFAULT_LOCOMO)
    parser.add_argument("--convs", default="0-4", help="conversation indices, e.g. 0-4 or 5-9")
    parser.add_argument("--only", help="comma-separated row numbers (1-5) to run")
    parser.add_argument("--json", action="store_true", help="print the table as JSON")
    parser.add_argument("--no-sessions", action="store_true",
                        help="turns without their session (source.session): no session lift")
    args = parser.parse_args()
    lo, hi = (int(x) for x in args.convs.split("-"))
    data = json.loads(args.locomo.read_text(encoding="utf-8"))
    variants = VARIANTS
    if args.only:
        names = list(VARIANTS)
        variants = {names[int(i) - 1]: VARIANTS[names[int(i) - 1]] for i in args.only.split(",")}
    started = time.perf_counter()
    table = run(data, range(lo, hi + 1), variants, not args.no_sessions)
    if args.json:
        print(json.dumps({"convs": args.convs, "results": table}, indent=2))
        return
    count = next(iter(table.values()))["questions"]
    print(f"LoCoMo conversations {args.convs}, categories 1-4: {count} questions ({time.perf_counter() - started:.0f} s)")
    print("| method | recall@10 | MRR | multi-hop | temporal | open-domain | single-hop |\n|---|---|---|---|---|---|---|")
    for name, v in table.items():
        print(f"| {name} | {v['recall@10']:.1f} | {v['mrr']:.3f} | {v['multi-hop']:.1f} | {v['temporal']:.1f} | "
              f"{v['open-domain']:.1f} | {v['single-hop']:.1f} |")


if __name__ == "__main__":
    main()
