"""KnowledgeDrift v2 through cortex's own user paths: replay a world, write the transcript, grade it.

KnowledgeDrift (github.com/techtheist/knowledgedrift, MIT) pours a seeded world of invented project
knowledge into a memory system through twelve operations, then questions it; a Rust grader scores the
transcript. This adapter is our own code against that protocol (docs/protocol.md there). It replays the
world's operations, in order, into a fresh git repository made with `cortex init`, through what a person
or an assistant runs:

- writes, links, supersessions, archives and deletions through the MCP server (`cortex mcp`, the tools
  `cortex_remember`, `cortex_link` and `cortex_forget`), one resident process for the whole world, on the
  world's clock (`CORTEX_NOW` at its base time; each note dated when the world says it was learnt);
- reads through the `cortex` command: `recall --json` (or, with `--recall-via mcp`, the MCP tool
  `cortex_search`), `show --json` for a history walk, `links --json` and `review BASE..HEAD --json` for
  the disagreements cortex raises, `briefing` for the standing cost.

A recall returns what a user is shown: each hit's title and the text cortex prints under it. What cortex
has no verb for is answered with what it honestly offers, and listed in docs/knowledgedrift.md.

    python -m bench.knowledgedrift --world W.json --grader PATH/knowledgedrift --out T.json [--graded G.json]

The grader and the worlds are built outside this tree (../shared/knowledgedrift-offline.md); seed 1 is the
held-out figure and is refused here.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

# The world's five kinds, as cortex's types (cortex has no "problem" or "insight" type: context).
TYPE_OF = {"Decision": "decision", "Caution": "gotcha", "Principle": "pattern", "Problem": "context",
           "Insight": "context"}

CAPABILITIES = {
    "link": True,           # `cortex links add ID OTHER --rel because` (MCP cortex_link); a hit carries its reason
    "history": True,        # `forget --replaced-by` keeps the old one, `show` names what a memory supersedes
    "trace": True,          # a forgotten memory leaves a trace; saving the same text again is warned
    "suspects": True,       # `cortex suspects`: the queue of contradictions and drift
    "temporal": True,       # `cortex recall --since/--until` (MCP since/until), by the date a note was learnt
    "verdict": False,       # recall has a relevance line ("nothing relevant"), not a decline beside hits
    "write_check": False,   # remember creates, never refuses or warns
    "endorse_retrieval": False, "endorse_assistant": False, "endorse_user": False, "endorse_supervisor": False,
}


# The world's link verbs cortex writes, as `because` links (the reason, or an open problem's answer, is carried
# with the hit it explains); True: the link runs the other way (X answers P is P because X). The associative
# verbs (about, builds-on, needs) are left to cortex's automatic relates_to links.
REASON_VERBS = {"because": False, "answers": True}


def stamp(epoch: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def epoch_of(stamp_text: str) -> int | None:
    import calendar

    try:
        return calendar.timegm(time.strptime(stamp_text, "%Y-%m-%dT%H:%M:%SZ"))
    except (TypeError, ValueError):
        return None


class Failure(Exception):
    """A step of the replay failed: the run stops (an error must never look like an empty answer)."""


def tokens(text: str) -> int:
    return -(-len(text) // 4)  # the grader's estimate


class Mcp:
    """`cortex mcp` on stdio: newline-delimited JSON-RPC, as any MCP client speaks it."""

    def __init__(self, cmd: list[str], env: dict[str, str], cwd: Path) -> None:
        self.proc = subprocess.Popen(cmd + ["mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=env, cwd=cwd, text=True, bufsize=1)
        self.next_id = 0
        self.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                    "clientInfo": {"name": "knowledgedrift-bench", "version": "1"}})
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        assert self.proc.stdout is not None
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise Failure(f"cortex mcp exited during {method}")
            reply = json.loads(line)
            if reply.get("id") == self.next_id:
                break
        if "error" in reply:
            raise Failure(f"{method}: {reply['error'].get('message')}")
        return reply["result"]

    def tool(self, name: str, arguments: dict[str, Any]) -> Any:
        result = self.request("tools/call", {"name": name, "arguments": arguments})
        text = "".join(part.get("text", "") for part in result.get("content", ()))
        if result.get("isError"):
            raise Failure(f"{name}: {text}")
        structured = result.get("structuredContent")
        if isinstance(structured, dict) and set(structured) != {"result"}:
            return structured
        return json.loads(text)

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Cortex:
    """One world's replay into a fresh repository."""

    def __init__(self, repo: Path, cortex_cmd: list[str], recall_via: str, now: int | None = None) -> None:
        self.repo = repo
        self.cmd = cortex_cmd
        self.recall_via = recall_via
        # The world's clock (its notes were learnt over the days before `base_ts`): ages and decay as it means them.
        clock = {"CORTEX_NOW": str(now)} if now is not None else {}
        self.env = os.environ | clock | {"CORTEX_HOME": str(repo.parent / "cortex-home"), "GIT_AUTHOR_NAME": "kd",
                                 "GIT_AUTHOR_EMAIL": "kd@example.invalid", "GIT_COMMITTER_NAME": "kd",
                                 "GIT_COMMITTER_EMAIL": "kd@example.invalid"}
        self.env.pop("CORTEX_DIR", None)
        self.key_to_id: dict[str, str] = {}
        self.id_to_key: dict[str, str] = {}
        self.settles: list[str] = []
        self.git("init", "-q", "-b", "main")
        self.git("commit", "-q", "--allow-empty", "-m", "empty")
        self.cli("init")
        self.mcp = Mcp(self.cmd, self.env, repo)
        # The resident query process the SessionStart hook starts: `cortex recall` asks it (and follows every
        # write through its file observer) instead of loading the index in each process.
        self.serve = subprocess.Popen([*self.cmd, "serve", "--idle", "900"], cwd=repo, env=self.env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) if recall_via == "cli" else None

    # ---- plumbing ----------------------------------------------------------------------------------
    def git(self, *args: str) -> str:
        done = subprocess.run(["git", *args], cwd=self.repo, env=self.env, capture_output=True, text=True)
        if done.returncode != 0:
            raise Failure(f"git {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    def cli(self, *args: str) -> str:
        done = subprocess.run([*self.cmd, *args], cwd=self.repo, env=self.env, capture_output=True, text=True)
        if done.returncode != 0:
            raise Failure(f"cortex {' '.join(args[:2])}: {(done.stderr or done.stdout).strip()[:300]}")
        return done.stdout

    def key(self, memory_id: str) -> str | None:
        return self.id_to_key.get(memory_id)

    def remember(self, record: dict[str, Any]) -> dict[str, Any]:
        arguments = {"text": record["body"], "title": record["title"][:200],
                     "type": TYPE_OF.get(record["kind"], "context"),
                     "files": list(dict.fromkeys(record.get("code_refs") or []))}
        if record.get("created_at") is not None:  # when the note was learnt, as a person importing notes says
            arguments["created"] = stamp(int(record["created_at"]))
        made = self.mcp.tool("cortex_remember", arguments)
        self.key_to_id[record["key"]] = made["id"]
        self.id_to_key[made["id"]] = record["key"]
        return made

    # ---- the operations ----------------------------------------------------------------------------
    def inscribe(self, record: dict[str, Any], mode: str) -> dict[str, Any]:
        made = self.remember(record)
        # remember's only write-time verdict: the text repeats a forgotten memory (saved all the same)
        warnings = []
        for warning in made.get("warnings", ()):
            if warning.get("reason") == "forgotten":
                key = self.key(str(warning.get("id")))
                warnings.append({"reason": "tombstoned", **({"key": key} if key else {})})
        return {"warnings": warnings} if warnings else {}

    def link(self, source: str, target: str, verb: str) -> None:
        if verb not in REASON_VERBS:
            return
        explained, reason = (target, source) if REASON_VERBS[verb] else (source, target)
        self.mcp.tool("cortex_link", {"id": self.key_to_id[explained], "other": self.key_to_id[reason],
                                      "rel": "because"})

    def supersede(self, old: str, new: dict[str, Any]) -> None:
        new_id = self.remember(new)["id"]
        self.mcp.tool("cortex_forget", {"id": self.key_to_id[old], "replaced_by": new_id})

    def release(self, key: str, reason: str) -> None:
        self.mcp.tool("cortex_forget", {"id": self.key_to_id[key], "reason": reason[:500]})  # archived, traced

    def purge(self, key: str) -> None:
        self.mcp.tool("cortex_forget", {"id": self.key_to_id[key], "delete": True})

    def write(self, op: dict[str, Any]) -> bool:
        """Carry out one of the world's writes other than inscribe (link, supersede, release, purge, settle);
        False when `op` is none of them."""
        kind = op["op"]
        if kind == "link":
            self.link(op["from"], op["to"], op["verb"])
        elif kind == "supersede":
            self.supersede(op["old"], op["new"])
        elif kind == "release":
            self.release(op["key"], op["reason"])
        elif kind == "purge":
            self.purge(op["key"])
        elif kind == "settle":
            self.settle()
        else:
            return False
        return True

    def settle(self) -> None:
        # A session boundary: the person commits what the session wrote (cortex never commits).
        self.git("add", ".cortex")
        self.git("commit", "-q", "--allow-empty", "-m", f"session {len(self.settles) + 1}")
        self.settles.append(self.git("rev-parse", "HEAD").strip())

    def recall(self, query: str, k: int, window: dict[str, int] | None = None) -> dict[str, Any]:
        # A window [after, before) as `--since`/`--until` (both ends inclusive, to the second).
        since = stamp(window["after"]) if window and window.get("after") is not None else None
        until = stamp(window["before"] - 1) if window and window.get("before") is not None else None
        if self.recall_via == "mcp":
            arguments: dict[str, Any] = {"query": query, "limit": k}
            arguments |= {name: value for name, value in (("since", since), ("until", until)) if value}
            found = self.mcp.tool("cortex_search", arguments)
            rows = found.get("results", found.get("hits", [])) if isinstance(found, dict) else found
            text_of = [row.get("text") or row.get("snippet") or "" for row in rows]
        else:
            span = [*(["--since", since] if since else []), *(["--until", until] if until else [])]
            rows = json.loads(self.cli("recall", query, "--json", "-n", str(k), *span) or "[]")
            text_of = [row.get("snippet") or "" for row in rows]
        return {"hits": shown_hits(rows, text_of, self.key)}

    def suspects(self) -> list[dict[str, Any]]:
        # the queue a person reads (`cortex suspects --json`): each pair with its kind, contradiction or drift
        pairs = []
        for row in json.loads(self.cli("suspects", "--json") or "[]"):
            a, b = self.key(row["a"]), self.key(row["b"])
            if a and b:
                pairs.append({"a": a, "b": b, "hint": row["kind"]})
        return pairs

    def lineage(self, key: str) -> list[str]:
        walked: list[str] = []
        todo = [self.key_to_id[key]]
        seen = set(todo)
        while todo:
            shown = json.loads(self.cli("show", todo.pop(), "--json"))
            for link in shown.get("links", ()):
                if link.get("rel") == "supersedes" and link["to"] not in seen:
                    seen.add(link["to"])
                    todo.append(link["to"])
                    if self.key(link["to"]):
                        walked.append(self.key(link["to"]))  # type: ignore[arg-type]
        return walked

    def standing_tokens(self) -> int:
        return tokens(self.cli("briefing"))

    def close(self) -> None:
        self.mcp.close()
        if self.serve is not None:
            self.serve.terminate()
            self.serve.wait()


def shown_hits(rows: list[dict[str, Any]], text_of: list[str], key_of: Callable[[str], str | None]
               ) -> list[dict[str, Any]]:
    """Recall's rows as the hits of a reply: what a person is shown (the title, the text under it, a `because:
    TITLE` line per reason the hit carries), the world's key, when it was learnt and the reasons' keys."""
    out = []
    for row, text in zip(rows, text_of):
        because = row.get("because") or []
        shown = "\n".join([row.get("title", ""), *([text] if text else []),
                           *(f"because: {reason['title']}" for reason in because)])
        entry: dict[str, Any] = {"text": shown}
        key = key_of(row["id"])
        if key is not None:
            entry["key"] = key
        created = epoch_of(row.get("created") or "")
        if created is not None:
            entry["created_at"] = created
        neighbours = [key_of(reason["id"]) for reason in because]
        if any(neighbours):
            entry["neighbors"] = [n for n in neighbours if n]
        out.append(entry)
    return out


def replay(world: dict[str, Any], work: Path, cortex_cmd: list[str], recall_via: str, jobs: int = 1,
           progress: bool = True) -> dict[str, Any]:
    repo = work / "repo"
    repo.mkdir(parents=True)
    system = Cortex(repo, cortex_cmd, recall_via, now=world["spec"].get("base_ts"))
    replies: list[dict[str, Any]] = []
    timing: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    ops = world["ops"]
    started = time.monotonic()
    # Questions in a row read a store nothing writes meanwhile: with --jobs, they are asked side by side
    # (each its own `cortex recall` process; the answers are the same, only sooner).
    pool = ThreadPoolExecutor(jobs) if jobs > 1 and recall_via == "cli" else None
    ahead: dict[int, Future[dict[str, Any]]] = {}
    try:
        for n, op in enumerate(ops, 1):
            t0 = time.monotonic()
            kind = op["op"]
            if pool is not None and kind in ("recall", "recall_path") and n not in ahead:
                m = n
                while m <= len(ops) and ops[m - 1]["op"] in ("recall", "recall_path"):
                    o = ops[m - 1]
                    ahead[m] = pool.submit(system.recall, o.get("query") or o["path"], o["k"], o.get("window"))
                    m += 1
            if n in ahead:
                replies.append({"reply": "recall", "id": op["id"], "result": ahead.pop(n).result()})
            elif kind == "inscribe":
                result = system.inscribe(op["record"], op["mode"])
                if op.get("id"):
                    replies.append({"reply": "inscribe", "id": op["id"], "result": result})
            elif kind == "endorse":
                pass  # no endorsement rung is declared
            elif system.write(op):
                pass
            elif kind == "recall":
                replies.append({"reply": "recall", "id": op["id"],
                                "result": system.recall(op["query"], op["k"], op.get("window"))})
            elif kind == "recall_path":
                # no path channel: the path is asked as a query, as the protocol's default does
                replies.append({"reply": "recall", "id": op["id"], "result": system.recall(op["path"], op["k"])})
            elif kind == "suspects":
                replies.append({"reply": "suspects", "id": op["id"], "pairs": system.suspects()})
            elif kind == "lineage":
                replies.append({"reply": "lineage", "id": op["id"], "keys": system.lineage(op["key"])})
            else:
                raise Failure(f"unknown operation {kind!r}")
            t = timing[kind]
            t[0] += 1
            t[1] += (time.monotonic() - t0) * 1000
            if progress and n % 250 == 0:
                print(f"  {n}/{len(ops)} ops, {time.monotonic() - started:.0f}s", file=sys.stderr, flush=True)
        standing = system.standing_tokens()
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
        system.close()
    return {"arm": f"cortex ({recall_via} recall)", "capabilities": CAPABILITIES, "standing_tokens": standing,
            "script_digest": world["digest"], "replies": replies,
            "timing": {k: {"count": int(c), "total_ms": round(ms, 1)} for k, (c, ms) in timing.items()}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.knowledgedrift", description=(
        "Replay a KnowledgeDrift v2 world through cortex (fresh git repository, `cortex init`, the MCP "
        "server and the cortex command), write the transcript, and grade it with the KnowledgeDrift grader. "
        "Build the grader and export worlds as ../shared/knowledgedrift-offline.md says; never seed 1."))
    parser.add_argument("--world", required=True, type=Path, help="an exported world (knowledgedrift-500-seed2-v2.json)")
    parser.add_argument("--out", required=True, type=Path, help="where to write the transcript (JSON)")
    parser.add_argument("--grader", type=Path, help="the built grader binary (target/release/knowledgedrift); "
                                                    "without it the transcript is written and not graded")
    parser.add_argument("--graded", type=Path, help="where the grader writes its JSON receipt")
    parser.add_argument("--recall-via", choices=("cli", "mcp"), default="cli",
                        help="recall through `cortex recall --json` (default) or the MCP tool cortex_search")
    parser.add_argument("--jobs", type=int, default=1,
                        help="questions in a row asked side by side (CLI recall; same answers, sooner)")
    parser.add_argument("--work", type=Path, help="folder for the repository (default: a temporary one, removed)")
    parser.add_argument("--cortex", default=f"{sys.executable} -m cortex",
                        help="how to run cortex (default: this Python's `-m cortex`)")
    args = parser.parse_args(argv)

    def fail(message: str) -> int:
        print(f"knowledgedrift: {message}", file=sys.stderr)
        return 2

    if not args.world.is_file():
        return fail(f"no world file at {args.world} (export one: knowledgedrift --v2 --sizes 500 --seed 2 --export DIR)")
    if args.grader is not None and not (args.grader.is_file() and os.access(args.grader, os.X_OK)):
        return fail(f"no grader at {args.grader} (build it: ../shared/knowledgedrift-offline.md)")
    try:
        world = json.loads(args.world.read_text())
        spec = world["spec"]
    except (OSError, ValueError, KeyError) as error:
        return fail(f"{args.world} is not a KnowledgeDrift world: {error}")
    if spec.get("seed") == 1:
        return fail("seed 1 is the held-out figure: tune on seeds 2 and 3 and worlds of your own seeds")

    work = args.work or Path(tempfile.mkdtemp(prefix="cortex-kd-"))
    if args.work is not None and work.exists() and any(work.iterdir()):
        return fail(f"{work} is not empty")
    began = time.monotonic()
    try:
        transcript = replay(world, work, args.cortex.split(), args.recall_via, max(1, args.jobs))
    except Failure as error:
        return fail(str(error))
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    transcript["settle_note"] = f"replayed in {time.monotonic() - began:.0f}s"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(transcript))
    print(f"wrote {args.out} ({len(transcript['replies'])} replies, {time.monotonic() - began:.0f}s)")
    if args.grader is None:
        return 0
    command = [str(args.grader), "--grade", str(args.out), "--script", str(args.world)]
    if args.graded is not None:
        command += ["--json", str(args.graded)]
    return subprocess.run(command).returncode


if __name__ == "__main__":
    sys.exit(main())
