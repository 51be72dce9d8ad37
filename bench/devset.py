"""Recall on cortex's developer question set (bench/data/devset.json), option by option.

    python bench/devset.py [--json] [--only 1,5]

The set holds 301 memories of 13 real projects' decisions, gotchas and
conventions and 151 questions phrased as people ask them (123 with an
answer in the store, 28 without: off-topic and in-domain). All memories go
into one store (each project's memories are distractors for the others).
For each option (the same `recall_store` code, only the ranked lists
differ) it prints recall@1 and recall@3 over the answerable questions, then
the prompt hook as `cortex serve` runs it (`events.prompt_context`, the
contextual model on): the share of answerable questions whose memory it
injected, how many memories it injected on average, and the share of
unanswerable questions for which it injected nothing. `--words` prints the
mean word overlap (Jaccard of content words) between questions and answers.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cortex import memory as fmt  # noqa: E402
from cortex import recall as recall_module  # noqa: E402
from cortex.index import Index, Indexes  # noqa: E402
from cortex.memory import Memory  # noqa: E402
from cortex.store import Store  # noqa: E402

DATA = Path(__file__).resolve().parent / "data" / "devset.json"
OPTIONS = {
    "BM25 (Whoosh BM25F)": ("bm25",),
    "static model alone": ("dense",),
    "contextual model alone": ("ctx",),
    "hybrid BM25 + static (one-shot hook)": ("bm25", "dense"),
    "re-ranked (serve, MCP, cortex recall)": ("bm25", "dense", "ctx"),
}


def build(folder: Path, data: dict) -> tuple[Store, dict[str, str]]:
    """A store holding every memory of the set; returns it and set id -> memory id."""
    store = Store.init(folder)
    ids = {}
    for n, item in enumerate(data["memories"]):
        memory = Memory(id=f"{n + 0xd00000000000:012x}", type=item["type"], title=item["title"], body=item["body"] + "\n",
                        tags=item["tags"], created="2026-01-01T00:00:00Z", updated="2026-01-01T00:00:00Z",
                        confidence=0.9, priority=5)
        path = store.memories_dir / item["type"] / fmt.file_name(memory)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(fmt.render_new(memory), encoding="utf-8")
        ids[item["id"]] = memory.id
    return store, ids


def ranks(store: Store, index: Index, questions: list[dict], ids: dict[str, str], methods: tuple[str, ...]) -> list[int | None]:
    out = []
    for q in questions:
        hits = recall_module.recall_store(store, q["question"], limit=10, index=index, sync=False, methods=methods).hits
        order = [h.memory.id for h in hits if h.via is None]
        want = ids[q["answer"]]
        out.append(order.index(want) + 1 if want in order else None)
    return out


def prompt_hook(store: Store, questions: list[dict], ids: dict[str, str]) -> dict[str, float]:
    """What the served prompt hook injects for each question."""
    from cortex.events import prompt_context

    indexes = Indexes()
    right = injected = quiet = answerable = unanswerable = 0
    for q in questions:
        context = prompt_context(store, q["question"], indexes) or ""
        count = context.count("\n- [")
        if q["answer"] is None:
            unanswerable += 1
            quiet += not context
        else:
            answerable += 1
            right += f"`{ids[q['answer']]}`" in context
            injected += count
    return {"right": right / answerable, "per_prompt": injected / answerable, "quiet": quiet / max(unanswerable, 1)}


def overlap(data: dict) -> float:
    from cortex.text import jaccard, words

    by_id = {m["id"]: m for m in data["memories"]}
    pairs = [(q["question"], by_id[q["answer"]]) for q in data["questions"] if q["answer"]]
    return sum(jaccard(words(q), words(m["title"] + " " + m["body"])) for q, m in pairs) / len(pairs)


def main() -> None:
    parser = argparse.ArgumentParser(description="cortex recall on the developer question set")
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--only", help="comma-separated option numbers (1-5)")
    parser.add_argument("--no-hook", action="store_true", help="skip the prompt hook rows")
    parser.add_argument("--words", action="store_true", help="print the question/answer word overlap")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    data = json.loads(args.data.read_text(encoding="utf-8"))
    options = OPTIONS
    if args.only:
        names = list(OPTIONS)
        options = {names[int(i) - 1]: OPTIONS[names[int(i) - 1]] for i in args.only.split(",")}
    answerable = [q for q in data["questions"] if q["answer"]]
    started = time.perf_counter()
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        store, ids = build(Path(tmp) / "dev" / ".cortex", data)
        index = Index(store)
        index.sync(full=True, progress=False)
        recall_module.use_contextual("inline")
        recall_module.fill_contextual(store, index)
        for name, methods in options.items():
            found = ranks(store, index, answerable, ids, methods)
            results[name] = {"recall@1": sum(r == 1 for r in found) / len(found),
                             "recall@3": sum(r is not None and r <= 3 for r in found) / len(found),
                             "mrr": sum(1 / r for r in found if r) / len(found)}
        hook = None if args.no_hook else prompt_hook(store, data["questions"], ids)
    if args.json:
        print(json.dumps({"options": results, "prompt_hook": hook}, indent=2))
        return
    print(f"developer set: {len(data['memories'])} memories, {len(answerable)} answerable questions, "
          f"{len(data['questions']) - len(answerable)} without an answer ({time.perf_counter() - started:.0f} s)")
    if args.words:
        print(f"mean word overlap question/answer (Jaccard of content words): {overlap(data):.3f}")
    print("| option | recall@1 | recall@3 | MRR |\n|---|---|---|---|")
    for name, v in results.items():
        print(f"| {name} | {v['recall@1']:.3f} | {v['recall@3']:.3f} | {v['mrr']:.3f} |")
    if hook:
        print(f"\nprompt hook (served): right memory injected for {hook['right']:.1%} of answerable questions, "
              f"{hook['per_prompt']:.1f} memories a prompt; nothing injected for {hook['quiet']:.1%} of the unanswerable")


if __name__ == "__main__":
    main()
