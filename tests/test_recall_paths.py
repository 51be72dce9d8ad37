"""Issue 41: every path a person meets answers alike, and the bench reads each path as it answers.

Real parts: the example store and small stores in git repositories, the `cortex` command as a subprocess,
`cortex serve` running, `cortex hook prompt` with Claude Code's JSON on stdin; bench/recall_paths.py's own
readers of those outputs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from cortex import serve
from tests.helpers import cortex, cortex_command, cortex_json, remember, wait_for

SQLITE_DECISION = "9b3e5695d219"  # "Keep each shop's ledger in its own SQLite file (WAL), not a shared Postgres…"
README_QUESTION = "which database did we decide on?"


def _ranked(repo: Path, query: str) -> list[str]:
    """The direct hits of `cortex recall QUERY --all --json` by score, best first, below the line included
    (`--all` lists the relevant ones first: the score is the ranking itself)."""
    hits = [h for h in cortex_json("recall", query, "--all", "--limit", "5", "--no-global", cwd=repo)
            if not h.get("via")]
    return [h["id"] for h in sorted(hits, key=lambda h: -h["score"])]


def _served(repo: Path) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([*cortex_command(), "serve", "--idle", "60"], cwd=repo, stderr=subprocess.DEVNULL)
    root = str(repo / ".cortex")
    assert wait_for(lambda: (serve.ask(root, {"op": "ping"}) or {}).get("ready"), 120)
    return proc


def test_the_readme_question_shows_the_sqlite_decision_first_served_and_not(repo, example_store):
    """"which database did we decide on?" on the README's example store: `cortex recall` shows the SQLite
    decision first through the one-shot command and through a running server (the 'database is locked'
    gotcha, which shares the word, stays below the relevance line)."""
    shutil.copytree(example_store, repo / ".cortex")
    assert cortex_json("recall", README_QUESTION, "--no-global", cwd=repo)[0]["id"] == SQLITE_DECISION
    proc = _served(repo)
    try:
        assert cortex_json("recall", README_QUESTION, "--no-global", cwd=repo)[0]["id"] == SQLITE_DECISION
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_an_identifier_the_question_names_still_lifts_its_memory(project):
    """Full text still adds what the transformer misses: a compiler error quoted word for word finds the
    memory holding it first."""
    wanted = remember(project, "verboseMCP redeclared in this block: the backup cmd/mcp_original.go left in the "
                      "package clashed with the rewrite; delete the backup.", type="gotcha")
    remember(project, "The MCP command serves over stdio by default, or HTTP with --transport http.",
             type="architecture")
    remember(project, "Go builds run inside nix develop because go is not on the PATH.", type="gotcha")
    assert _ranked(project, "verboseMCP redeclared in this block")[0] == wanted.id


def test_the_bench_reads_the_same_answers_from_the_command_and_the_hook_served_and_not(project):
    """bench/recall_paths.py's readers of the command's JSON and of the hook's stdout give the same memories
    with and without a server (one relevance rule for every path), and the hook stays silent off topic."""
    from bench.recall_paths import command_ids, hook_ids

    answer = remember(project, "Money amounts are integers in cents, never floats, to avoid rounding drift.",
                      type="decision")
    remember(project, "Background jobs run on RQ with one Redis queue per shop.", type="architecture")
    cortex("recall", "warm up", cwd=project)
    env = dict(os.environ)
    questions = ["do we keep money amounts as floats?", "what is the capital of australia?"]
    cold = [(command_ids(project, q, env), hook_ids(project, q, f"cold-{n}", env)) for n, q in enumerate(questions)]
    proc = _served(project)
    try:
        served = [(command_ids(project, q, env), hook_ids(project, q, f"served-{n}", env))
                  for n, q in enumerate(questions)]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert served == cold
    assert cold[0][0][0] == answer.id and cold[0][1] == [answer.id]
    assert cold[1] == ([], [])
    assert json.dumps(cold)  # plain data, as the bench scores it
