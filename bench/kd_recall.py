"""KnowledgeDrift's recall questions in minutes: replay a world's writes once, then re-ask only its questions.

The full adapter (bench/knowledgedrift.py) replays a whole world and takes 20-80 minutes. Every write of a world
comes before its first question, and the retrieval, abstention, currency, rationale and temporal questions are
asked in a row with nothing written between them; so this script replays the writes once, through the adapter's
own code (MCP `cortex_remember`, `cortex_link`, `cortex_forget`, a commit), into `--store DIR` (kept), fills every
contextual vector (`cortex maintain`), and then asks those questions as often as you like through `cortex recall
QUERY --json -n 10` run in this process (click's runner, no server: "command cold", which answers as the served
command does), turns each answer into what the adapter shows (`bench.knowledgedrift.shown_hits`) and grades it by
the grader's rules for these families (its crate's src/grade.rs: recall@5 with the answer readable, a stale
sibling above, abstention as an empty answer, the head without a retired generation, a reason among the top
five's neighbours, nothing from outside the window). Tokens are the grader's (characters / 4).

    python bench/kd_recall.py --world W.json --store DIR [--families retrieval,abstention] [--sample N]
        [--transcript T.json] [--failures F.json]

`--transcript` writes the replies (the adapter's format), `--failures` the failed questions with what was shown.
Seed 1 is refused, as by the adapter.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.knowledgedrift import Cortex, shown_hits, tokens  # noqa: E402

FAMILIES = ("retrieval", "abstention", "currency", "rationale", "temporal")


def replay_writes(world: dict[str, Any], repo: Path) -> dict[str, str]:
    """Every write before the world's first question, into a fresh repository; key -> memory id."""
    repo.mkdir(parents=True)
    system = Cortex(repo, [sys.executable, "-m", "cortex"], "mcp", now=world["spec"].get("base_ts"))
    try:
        for op in world["ops"]:
            kind = op["op"]
            if kind in ("recall", "recall_path", "suspects", "lineage"):
                break
            if kind == "inscribe":
                system.inscribe(op["record"], op["mode"])
            else:
                system.write(op)
    finally:
        system.close()
    subprocess.run([sys.executable, "-m", "cortex", "maintain"], cwd=repo, env=system.env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return system.key_to_id


def questions(world: dict[str, Any], families: set[str]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(operation, probe) of each question of `families` asked before the world writes again."""
    probes = {p["id"]: p for p in world["probes"]}
    out = []
    started = False
    for op in world["ops"]:
        if op["op"] in ("recall", "recall_path"):
            started = True
            probe = probes.get(op["id"])
            if probe is not None and probe["family"] in families:
                out.append((op, probe))
        elif started and op["op"] not in ("lineage",):
            break
    return out


def ask(repo: Path, env: dict[str, str], key_of: dict[str, str], op: dict[str, Any]) -> dict[str, Any]:
    """One question as the adapter asks it, through the `cortex recall` command in this process."""
    from click.testing import CliRunner

    from bench.knowledgedrift import stamp
    from cortex.cli import main

    window = op.get("window")
    span: list[str] = []
    if window and window.get("after") is not None:
        span += ["--since", stamp(window["after"])]
    if window and window.get("before") is not None:
        span += ["--until", stamp(window["before"] - 1)]
    query = op.get("query") or op["path"]
    done = CliRunner().invoke(main, ["recall", query, "--json", "-n", str(op["k"]), *span], env=env,
                              catch_exceptions=False)
    if done.exit_code != 0:
        raise SystemExit(f"cortex recall {query!r}: {done.output.strip()[:300]}")
    rows = json.loads(done.stdout or "[]")
    return {"hits": shown_hits(rows, [row.get("snippet") or "" for row in rows], key_of.get)}


def rank_of(hits: list[dict[str, Any]], key: str) -> int | None:
    return next((n for n, h in enumerate(hits, 1) if h.get("key") == key), None)


def readable(hits: list[dict[str, Any]], key: str, answer: str) -> bool:
    return not answer or any(h.get("key") == key and answer.lower() in h["text"].lower() for h in hits)


def grade(probe: dict[str, Any], reply: dict[str, Any]) -> tuple[bool, dict[str, float]]:
    """Whether the question passes, and the grader's columns for it (src/grade.rs)."""
    hits = reply["hits"]
    shown = sum(tokens(h["text"]) for h in hits)
    expect, cols = probe["expect"], {"tokens": float(shown), "hits": float(len(hits))}
    if expect == "gold":
        rank = rank_of(hits, probe["gold"]) if readable(hits, probe["gold"], probe.get("answer", "")) else None
        stale = rank_of(hits, probe["stale"]) if probe.get("stale") else None
        above = stale is not None and (rank is None or stale < rank)
        cols |= {"r@5": rank is not None and rank <= 5, f"{probe['phrasing']}_r@5": rank is not None and rank <= 5,
                 "r@1": rank == 1}
        if probe.get("stale"):
            cols["stale_above"] = above
        return rank is not None and rank <= 5 and not above, cols
    if expect == "bound":
        answers = probe.get("answers") or []
        ranks = [rank_of(hits, g) for i, g in enumerate(probe["gold"])
                 if readable(hits, g, answers[i] if i < len(answers) else "")]
        best = min((r for r in ranks if r is not None), default=None)
        cols["path_r@5"] = best is not None and best <= 5
        return bool(cols["path_r@5"]), cols
    if expect == "control":
        cols["natural_fp" if probe.get("natural") else "phantom_fp"] = bool(hits)
        return not hits, cols
    if expect == "current":
        rank = rank_of(hits, probe["head"]) if readable(hits, probe["head"], probe.get("answer", "")) else None
        polluted = any(rank_of(hits, k) is not None for k in probe["retired"])
        cols |= {"head_r@5": rank is not None and rank <= 5, "pollution": polluted}
        return rank is not None and rank <= 5 and not polluted, cols
    if expect == "linked":
        rank = rank_of(hits, probe["gold"])
        direct = rank is not None and rank <= 5 and readable(hits, probe["gold"], probe.get("answer", ""))
        assisted = any(probe["gold"] in h.get("neighbors", ()) for h in hits[:5])
        cols |= {"direct_r@5": direct}
        return direct or assisted, cols
    if expect == "windowed":
        window = probe["window"]
        rank = rank_of(hits, probe["gold"])
        found = rank is not None and rank <= 5 and readable(hits, probe["gold"], probe.get("answer", ""))
        leak = any(h.get("created_at") is not None and not (
            (window.get("after") is None or h["created_at"] >= window["after"])
            and (window.get("before") is None or h["created_at"] < window["before"])) for h in hits)
        cols |= {"leak": leak}
        return found and not leak, cols
    raise SystemExit(f"no rule for a {expect!r} question ({probe['id']})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python bench/kd_recall.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--world", required=True, type=Path)
    parser.add_argument("--store", required=True, type=Path, help="folder of the replayed repository (kept; made "
                                                                    "on the first run)")
    parser.add_argument("--families", default="retrieval,abstention", help="from: " + ",".join(FAMILIES))
    parser.add_argument("--sample", type=int, help="every k-th question of each family (of each phrasing, shared "
                                                   "among them), this many at most")
    parser.add_argument("--transcript", type=Path)
    parser.add_argument("--failures", type=Path)
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    args = parser.parse_args(argv)
    world = json.loads(args.world.read_text())
    if world["spec"].get("seed") == 1:
        print("kd_recall: seed 1 is the held-out figure", file=sys.stderr)
        return 2
    repo, keys = args.store / "repo", args.store / "keys.json"
    if not keys.exists():
        began = time.monotonic()
        keys.write_text(json.dumps(replay_writes(world, repo)))
        print(f"replayed the writes in {time.monotonic() - began:.0f}s", file=sys.stderr)
    key_of = {memory_id: key for key, memory_id in json.loads(keys.read_text()).items()}
    env = {"CORTEX_HOME": str(args.store / "cortex-home"), "CORTEX_NOW": str(world["spec"]["base_ts"])}
    env_before = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    os.environ.pop("CORTEX_DIR", None)
    os.chdir(repo)
    asked = questions(world, set(args.families.split(",")))
    if args.sample:  # every k-th of each family, k-th of each phrasing (questions cycle through them in turn)
        by_kind: dict[tuple[str, str], list[Any]] = defaultdict(list)
        for item in asked:
            probe = item[1]
            by_kind[(probe["family"], probe.get("phrasing") or str(probe.get("natural", probe["expect"])))].append(item)
        families: dict[str, int] = defaultdict(int)
        for family, _ in by_kind:
            families[family] += 1
        asked = []
        for (family, _), items in by_kind.items():
            share = max(1, args.sample // families[family])
            asked += items[::max(1, len(items) // share)][:share]
    began = time.monotonic()
    passed: dict[str, list[bool]] = defaultdict(list)
    columns: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    replies, failures = [], []
    for op, probe in asked:
        reply = ask(repo, env, key_of, op)
        ok, cols = grade(probe, reply)
        passed[probe["family"]].append(ok)
        for name, value in cols.items():
            columns[probe["family"]][name].append(float(value))
        replies.append({"reply": "recall", "id": op["id"], "result": reply})
        if not ok:
            failures.append({"id": op["id"], "probe": probe, "query": op.get("query") or op.get("path"),
                             "hits": reply["hits"]})
    for name, value in env_before.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    summary = {family: {"pass": sum(ok) / len(ok), "n": len(ok),
                        **{name: sum(v) / len(v) for name, v in sorted(columns[family].items())}}
               for family, ok in passed.items()}
    every = [t for family in columns.values() for t in family["tokens"]]
    summary["all"] = {"tokens": sum(every) / max(1, len(every)), "seconds": time.monotonic() - began}
    if args.transcript:
        args.transcript.write_text(json.dumps({"replies": replies}))
    if args.failures:
        args.failures.write_text(json.dumps(failures, indent=1))
    if args.json:
        print(json.dumps(summary, indent=1))
    else:
        for family, row in summary.items():
            print(f"{family:<11} " + "  ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}"
                                              for k, v in row.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
