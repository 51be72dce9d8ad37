"""Generate a synthetic cortex store of N memories for benchmarks.

    python bench/gen_store.py DEST --count 10000 [--seed 1]

Memories are written in the exact format cortex writes (checked against
`cortex.memory.render_new`), with varied types, tags, files, links and
~80-word bodies whose words follow a Zipf distribution over 8,000 words
(developer terms among the frequent ones), so full-text posting lists have
the shape of real notes rather than a tiny vocabulary where every word is in
every third memory. Deterministic for a given seed.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

from cortex import memory as fmt
from cortex.memory import Link, Memory
from cortex.store import Store

WORDS = (
    "cache index query schema migration deploy rollback branch merge review test fixture mock latency "
    "throughput database sqlite postgres redis queue worker retry timeout token auth session cookie header "
    "request response endpoint handler router middleware config env secret vault docker kubernetes helm "
    "pipeline build artifact wheel package import module function class method decorator async await thread "
    "lock race deadlock memory leak profile benchmark regression flaky ci lint format type check mypy ruff "
    "pytest hypothesis property invariant log metric trace alert dashboard incident outage hotfix patch release "
    "version semver changelog api client server socket http grpc json yaml toml parser encoder decoder utf8 "
    "unicode path file folder permission user admin role tenant billing invoice payment webhook event stream"
).split()
SYLLABLES = "ka lo mi ne ru sa ti vo za be cu da fe gi ho ju ki lu ma no pe qui ra se to un ve wi xa yo".split()


def _vocabulary(size: int = 8000) -> list[str]:
    """WORDS plus pseudo-words, in Zipf rank order: a few words are everywhere, most are rare, as in real notes."""
    rng = random.Random(7)
    pseudo: set[str] = set()
    while len(pseudo) < size:
        pseudo.add("".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4))))
    ranked = sorted(pseudo)
    rng.shuffle(ranked)
    for i, word in enumerate(WORDS):  # developer words spread over ranks 30 to 3,000
        ranked.insert(30 + i * 20, word)
    return ranked


VOCABULARY = _vocabulary()
_CUMULATIVE = list(__import__("itertools").accumulate(1.0 / (rank + 1) ** 1.07 for rank in range(len(VOCABULARY))))
TYPES = ("decision", "gotcha", "pattern", "context", "progress", "architecture", "plan", "code_description")
BRANCHES = ("main", "main", "main", "feature/search", "feature/auth", "fix/flaky-ci")


def sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choices(VOCABULARY, cum_weights=_CUMULATIVE, k=n))


def _plain_id(rng: random.Random) -> str:
    while True:  # the same rule as cortex.memory.new_id: never an id YAML reads as a number
        candidate = f"{rng.getrandbits(48):012x}"
        if not fmt._YAML_NUMBER.match(candidate):
            return candidate


def make_memory(rng: random.Random, index: int, ids: list[str]) -> Memory:
    kind = rng.choice(TYPES)
    title = f"{sentence(rng, rng.randint(4, 9)).capitalize()} ({index})"
    body = ". ".join(sentence(rng, rng.randint(8, 16)).capitalize() for _ in range(rng.randint(5, 7))) + ".\n"
    day = rng.randint(1, 28)
    links = []
    if ids and rng.random() < 0.3:
        links.append(Link("relates_to", rng.choice(ids), round(rng.uniform(0.1, 0.5), 2)))
    return Memory(
        id=_plain_id(rng),
        type=kind,
        title=title,
        body=body,
        confidence=round(rng.uniform(0.5, 1.0), 2),
        priority=rng.randint(1, 10),
        pinned=rng.random() < 0.01,
        branch=rng.choice(BRANCHES),
        tags=sorted({rng.choice(WORDS) for _ in range(rng.randint(0, 3))}),
        files=[f"src/{rng.choice(WORDS)}/{rng.choice(WORDS)}.py" for _ in range(rng.randint(0, 2))],
        created=f"2026-{rng.randint(1, 10):02d}-{day:02d}T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:00Z",
        updated=f"2026-11-{day:02d}T12:00:00Z",
        source={"kind": "transcript", "session": f"s{rng.getrandbits(60):015x}", "layer": "keyword"},
        links=links,
    )


def render_fast(item: Memory) -> str:
    """The canonical text of a generated memory, without ruamel (100,000 files in seconds, not minutes).

    Only valid for the plain values this generator makes; `generate` checks the
    first memory against `cortex.memory.render_new` so the two cannot drift.
    """
    lines = [
        "---", f"id: {item.id}", f"type: {item.type}", f"title: {item.title}", f"status: {item.status}",
        f"confidence: {item.confidence}", f"priority: {item.priority}", f"pinned: {str(item.pinned).lower()}",
        f"scope: {item.scope}", f"branch: {item.branch}", f"tags: [{', '.join(item.tags)}]",
        f"files: [{', '.join(item.files)}]", f"created: {item.created}", f"updated: {item.updated}",
        "source: {" + ", ".join(f"{k}: {v}" for k, v in item.source.items()) + "}",
    ]
    if item.links:
        lines.append("links:")
        lines.extend(f"  - {{rel: {l.rel}, to: {l.to}, strength: {l.strength}}}" for l in item.links)
    return "\n".join(lines) + "\n---\n" + item.body


def generate(dest: Path, count: int, seed: int = 1) -> Store:
    """Create a store at `dest` (its `.cortex` folder) holding `count` memories."""
    store = Store.init(dest)
    rng = random.Random(seed)
    ids: list[str] = []
    for index in range(count):
        item = make_memory(rng, index, ids)
        ids.append(item.id)
        text = render_fast(item)
        if index == 0:
            assert text == fmt.render_new(item), "bench generator drifted from the real file format"
        path = store.memories_dir / item.type / fmt.file_name(item)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return store


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dest", type=Path, help="store folder to create (e.g. /tmp/bench/.cortex)")
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    generate(args.dest, args.count, args.seed)
    print(f"wrote {args.count} memories to {args.dest}")


if __name__ == "__main__":
    main()
