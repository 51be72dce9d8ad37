"""Recall on every question set through the paths a person meets: the command, the prompt hook and MCP.

    python bench/recall_paths.py [--sets devset,sessions,capture-dev] [--paths ...] [--sample N] [--json]

Sets: `devset` (bench/data/devset.json), `sessions` (bench/data/heldout-sessions.json), `capture-dev`
(bench/data/capture-dev-questions.json over shared/data/capture-dev's gold facts) and `line` (the sessions set's
memories asked bench/data/heldout-line.json: 20 answerable, 20 never written, kept apart from the tuning). Each set's memories go
into one store in a fresh git repository, saved as `cortex remember` saves them (`cortex.events.remember`, in
process: 500 subprocesses would take minutes), then indexed with every contextual vector made (the state a
person has once the upkeep ran). Each question is then asked through each path:

- `library ctx` / `library fused`: `recall_store` with the transformer's list alone / today's fusion (a
  reference for "fusion cannot lose the best list", not a user path);
- `command cold` / `command served`: `cortex recall Q --json --limit 10 --no-global` in the repository,
  without / with a `cortex serve` running for the store;
- `hook cold` / `hook served`: `cortex hook prompt` with Claude Code's UserPromptSubmit JSON on stdin (a new
  session id each question), without / with the server; the memories it injects, in order;
- `mcp`: `cortex_search` (limit 10, scope project) through the MCP SDK's client on one `cortex mcp`.

For answerable questions it prints recall@1 and recall@3 (over what the path shows: relevant direct hits
for the command and MCP, what is injected for the hook), the same over the paraphrases (questions sharing
at most one content word with the answer), and for the rest the share where the path says nothing (the
hook injects nothing; the command prints `[]`; MCP returns no result). `--sample N` asks N questions per set
(every k-th, the same ones on every path). LoCoMo 0-4 is measured by bench/recall_command.py.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

# bench/ itself off the path: its mcp.py would shadow the MCP SDK
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cortex import recall as recall_module  # noqa: E402

DATA = Path(__file__).resolve().parent / "data"
CAPTURE_DEV = Path(__file__).resolve().parents[2] / "shared" / "data" / "capture-dev"
CORTEX = [str(Path(sys.executable).parent / "cortex")]
PATHS = ("library ctx", "library fused", "command cold", "command served", "hook cold", "hook served", "mcp")
SETS = ("devset", "sessions", "capture-dev", "line")
_ID = re.compile(r"`([0-9a-f]{12})`")


def load_set(name: str, capture_dev: Path = CAPTURE_DEV) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(memories as `cortex remember` would get them: id, type, title or None, text, tags; questions)."""
    if name == "capture-dev":
        memories = []
        for path in sorted(glob.glob(str(capture_dev / "*.gold.json"))):
            stem = Path(path).name[: -len(".gold.json")]
            for n, item in enumerate(json.loads(Path(path).read_text(encoding="utf-8"))["items"]):
                memories.append({"id": f"{stem}-{n:02d}", "type": item["type"], "title": None,
                                 "text": item["statement"], "tags": []})
        return memories, json.loads((DATA / "capture-dev-questions.json").read_text(encoding="utf-8"))["questions"]
    data = json.loads((DATA / ("devset.json" if name == "devset" else "heldout-sessions.json")).read_text(encoding="utf-8"))
    memories = [{"id": m["id"], "type": m["type"], "title": m["title"], "text": m["body"], "tags": m["tags"]}
                for m in data["memories"]]
    if name == "line":  # the sessions set's memories, asked questions written for the relevance line
        return memories, json.loads((DATA / "heldout-line.json").read_text(encoding="utf-8"))["questions"]
    return memories, data["questions"]


def paraphrase(question: dict[str, Any], memory: dict[str, Any]) -> bool:
    """At most one content word shared with the answer's title and text."""
    from cortex.text import words

    return len(set(words(question["question"])) & set(words(f"{memory['title'] or ''} {memory['text']}"))) <= 1


def plant(repo: Path, memories: list[dict[str, Any]]) -> tuple[Any, dict[str, str]]:
    """A git repository with a store holding the memories, saved as `cortex remember` saves them, indexed, with
    every contextual vector made; returns the store and set id -> memory id."""
    import pygit2

    from cortex.events import remember
    from cortex.index import Index, Indexes
    from cortex.store import Store

    repo.mkdir(parents=True)
    pygit2.init_repository(str(repo), initial_head="main")
    store = Store.init(repo / ".cortex")
    indexes = Indexes()
    ids = {m["id"]: remember(store, m["text"], indexes, type=m["type"], title=m["title"], tags=m["tags"]).id
           for m in memories}
    index = Index(store)
    index.sync(full=True, progress=False)
    recall_module.use_contextual("inline")
    recall_module.fill_contextual(store, index)
    return store, ids


def serve(store_root: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """A `cortex serve` for the store, once it answers with its warm-up done."""
    from cortex.serve import ask

    server = subprocess.Popen([*CORTEX, "serve", "--dir", str(store_root), "--idle", "900"], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while time.time() < deadline:
        answer = ask(str(store_root), {"op": "ping"}, timeout=2.0)
        if answer and answer.get("ready"):
            return server
        time.sleep(0.5)
    server.kill()
    raise SystemExit(f"cortex serve for {store_root} did not get ready")


def command_ids(repo: Path, question: str, env: dict[str, str]) -> list[str]:
    """The ids `cortex recall QUESTION --json` shows, direct hits in order."""
    done = subprocess.run([*CORTEX, "recall", question, "--json", "--limit", "10", "--no-global"], cwd=repo,
                          capture_output=True, text=True, env=env, timeout=300)
    if done.returncode != 0:
        raise SystemExit(f"cortex recall {question!r} exited {done.returncode}: {done.stderr}")
    return [h["id"] for h in json.loads(done.stdout) if not h.get("via")]


def hook_ids(repo: Path, question: str, session: str, env: dict[str, str]) -> list[str]:
    """The ids `cortex hook prompt` injects for QUESTION, in order."""
    payload = {"hook_event_name": "UserPromptSubmit", "session_id": session, "cwd": str(repo), "prompt": question,
               "transcript_path": str(repo / "transcript.jsonl")}
    done = subprocess.run([*CORTEX, "hook", "prompt"], cwd=repo, input=json.dumps(payload), capture_output=True,
                          text=True, env=env, timeout=300)
    if done.returncode != 0:
        raise SystemExit(f"cortex hook prompt {question!r} exited {done.returncode}: {done.stderr}")
    if not done.stdout.strip():
        return []
    context = json.loads(done.stdout).get("hookSpecificOutput", {}).get("additionalContext", "")
    return _ID.findall(context)


@contextmanager
def mcp_client(repo: Path, env: dict[str, str]) -> Iterator[Any]:
    """A function asking `cortex_search` of one `cortex mcp` in the repository (the SDK's own client)."""
    from anyio.from_thread import start_blocking_portal
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(command=CORTEX[0], args=["mcp"], cwd=str(repo), env=env)
    with start_blocking_portal() as portal:
        with portal.wrap_async_context_manager(stdio_client(params)) as (read, write):
            with portal.wrap_async_context_manager(ClientSession(read, write)) as session:
                portal.call(session.initialize)

                def search(question: str) -> list[str]:
                    result = portal.call(session.call_tool, "cortex_search",
                                         {"query": question, "limit": 10, "budget_tokens": 20000, "scope": "project"})
                    return [row["id"] for row in result.structured_content["results"] if not row.get("via")]
                yield search


def library_ids(store: Any, index: Any, question: str, methods: tuple[str, ...]) -> list[str]:
    hits = recall_module.recall_store(store, question, limit=10, index=index, sync=False, methods=methods,
                                      read=False, links=False).hits
    return [h.memory.id for h in hits]


def run_set(name: str, paths: tuple[str, ...], sample: int | None, tmp: Path) -> dict[str, dict[str, float]]:
    from cortex.index import Index

    memories, questions = load_set(name)
    if sample and sample < len(questions):
        step = len(questions) / sample
        questions = [questions[int(i * step)] for i in range(sample)]
    by_id = {m["id"]: m for m in memories}
    repo = tmp / name
    store, ids = plant(repo, memories)
    home = tmp / f"home-{name}"
    env = {**os.environ, "CORTEX_HOME": str(home / ".cortex"), "HOME": str(home), "CORTEX_NESTED": "0"}
    env.pop("CORTEX_DIR", None)
    answers: dict[str, list[list[str]]] = {}
    index = Index(store)
    index.sync(full=True, progress=False)
    asked = [q["question"] for q in questions]
    if "library ctx" in paths:
        answers["library ctx"] = [library_ids(store, index, q, ("ctx",)) for q in asked]
    if "library fused" in paths:
        answers["library fused"] = [library_ids(store, index, q, ("bm25", "dense", "ctx")) for q in asked]
    if "command cold" in paths:
        answers["command cold"] = [command_ids(repo, q, env) for q in asked]
    if "hook cold" in paths:
        answers["hook cold"] = [hook_ids(repo, q, f"bench-cold-{n}", env) for n, q in enumerate(asked)]
    if "mcp" in paths:
        with mcp_client(repo, env) as search:
            answers["mcp"] = [search(q) for q in asked]
    if "command served" in paths or "hook served" in paths:
        server = serve(store.root, env)
        try:
            if "command served" in paths:
                answers["command served"] = [command_ids(repo, q, env) for q in asked]
            if "hook served" in paths:
                answers["hook served"] = [hook_ids(repo, q, f"bench-served-{n}", env) for n, q in enumerate(asked)]
        finally:
            server.terminate()
            server.wait(30)
    out = {}
    for path, found in answers.items():
        out[path] = score(questions, found, ids, by_id)
    return out


def score(questions: list[dict[str, Any]], found: list[list[str]], ids: dict[str, str],
          by_id: dict[str, dict[str, Any]]) -> dict[str, float]:
    """recall@1/@3 over the answerable questions and their paraphrases; silent share over the rest."""
    ranks, para, quiet = [], [], []
    for q, shown in zip(questions, found):
        if q["answer"] is None:
            quiet.append(not shown)
            continue
        want = ids[q["answer"]]
        rank = shown.index(want) + 1 if want in shown else None
        ranks.append(rank)
        if paraphrase(q, by_id[q["answer"]]):
            para.append(rank)

    def at(values: list[int | None], k: int) -> float:
        return sum(r is not None and r <= k for r in values) / max(len(values), 1)

    return {"r@1": at(ranks, 1), "r@3": at(ranks, 3), "found": at(ranks, 10), "para r@3": at(para, 3),
            "silent": sum(quiet) / max(len(quiet), 1), "answerable": len(ranks), "paraphrases": len(para),
            "unanswerable": len(quiet)}


def main() -> None:
    parser = argparse.ArgumentParser(description="recall through the command, the prompt hook and MCP")
    parser.add_argument("--sets", default=",".join(SETS))
    parser.add_argument("--paths", default=",".join(PATHS), help="comma-separated, from: " + ", ".join(PATHS))
    parser.add_argument("--sample", type=int, help="ask this many questions per set (every k-th)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    paths = tuple(p.strip() for p in args.paths.split(","))
    unknown = [p for p in paths if p not in PATHS]
    if unknown:
        raise SystemExit(f"--paths: unknown {', '.join(unknown)} (from: {', '.join(PATHS)})")
    results: dict[str, Any] = {}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.sets.split(","):
            results[name] = run_set(name, paths, args.sample, Path(tmp))
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"({time.perf_counter() - started:.0f} s{f', {args.sample} questions a set' if args.sample else ''})")
    print("| set | path | recall@1 | recall@3 | paraphrases recall@3 | found (≤10) | silent, no answer |")
    print("|---|---|---|---|---|---|---|")
    for name, by_path in results.items():
        for path, v in by_path.items():
            print(f"| {name} ({v['answerable']}+{v['unanswerable']}, {v['paraphrases']} para.) | {path} | "
                  f"{v['r@1']:.2f} | {v['r@3']:.2f} | {v['para r@3']:.2f} | {v['found']:.2f} | "
                  f"{'—' if path.startswith('library') else format(v['silent'], '.2f')} |")


if __name__ == "__main__":
    main()
