"""Capture's duplicate check on a store of many memories: from the cache's metadata and vectors, the word overlap
read only for the memories nearest in meaning, and memories without a vector yet still compared."""

from __future__ import annotations

import json
import random
from pathlib import Path

from cortex.memory import Memory
from cortex.store import Store
from tests.helpers import cortex

WORDS = ("queue worker retry timeout token session cookie header router middleware config docker helm pipeline "
         "artifact wheel module decorator thread deadlock profile benchmark lint fixture schema migration rollback "
         "branch latency throughput invoice payment webhook tenant billing socket parser encoder").split()


def _stop(project: Path, transcript: Path, text: str) -> None:
    line = {"type": "assistant", "uuid": f"a-{abs(hash(text))}", "sessionId": "s-1", "gitBranch": "main",
            "message": {"id": f"m-{abs(hash(text))}", "role": "assistant", "content": [{"type": "text", "text": text}]}}
    with open(transcript, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(line) + "\n")
    payload = {"session_id": "s-1", "transcript_path": str(transcript), "cwd": str(project), "hook_event_name": "Stop",
               "stop_hook_active": False}
    cortex("hook", "stop", cwd=project, input=json.dumps(payload))


def _gotchas(project: Path) -> list[str]:
    return sorted(item.title for item in Store.locate(project).list(types=["gotcha"]))


def test_a_repeat_is_found_among_many_memories_of_its_type(project, tmp_path):
    store = Store.locate(project)
    config = store.root / "config.yaml"  # cosine alone never decides here: the word overlap must find them
    config.write_text(config.read_text(encoding="utf-8").replace("dedup_cosine: 0.9", "dedup_cosine: 0.999"),
                      encoding="utf-8")
    rng = random.Random(3)
    for n in range(120):  # many memories of the same type, each a different mix of the same vocabulary
        body = " ".join(rng.choice(WORDS) for _ in range(14)) + f" case {n}.\n"
        store.create(Memory(id="", type="gotcha", title=f"Gotcha {n}: {body[:40]}", body=body))
    original = ("The CI image ships SQLite 3.31 which lacks DROP COLUMN support so migrations dropping columns "
                "fail in CI only")
    store.create(Memory(id="", type="gotcha", title="CI SQLite lacks DROP COLUMN", body=original + "\n"))
    cortex("reindex", cwd=project)  # every memory so far has a vector in the cache
    late = "Helm upgrades hang when the release history is full; prune it with max history ten before deploying"
    store.create(Memory(id="", type="gotcha", title="Helm history full hangs upgrades", body=late + "\n"))
    before = _gotchas(project)
    transcript = tmp_path / "t.jsonl"
    # A repeat in slightly different words (word overlap >= 0.7), of a memory that has a vector ...
    _stop(project, transcript, "[MEMORY: gotcha: The CI image ships SQLite 3.31 which lacks DROP COLUMN support so "
                               "migrations dropping columns fail in CI]")
    # ... and of one written since the vectors were built (no vector yet: compared by its words).
    _stop(project, transcript, "[MEMORY: gotcha: Helm upgrades hang when the release history is full; prune it "
                               "with max history ten before deploying anything]")
    assert _gotchas(project) == before
    _stop(project, transcript, "[MEMORY: gotcha: Kafka consumers stall when the broker's clock drifts]")
    assert len(_gotchas(project)) == len(before) + 1  # something new is still written
