"""Salience on replayed real sessions: what share of the memories the prompt hook injects gets used.

    python bench/salience.py [--only NAME] [--json OUT]

Sessions: the ten capture-dev sessions (`shared/data/capture-dev/*.chat.json`)
and the six shared transcripts (`shared/data/transcripts/`, sub-agent files
left out). The store: for each session, what `cortex capture` writes from it
plus the hand-made gold facts of capture-dev (`*.gold.json`) — every memory
tagged with the session it came from. A session is replayed on a store
holding the memories of every *other* session (its own would not exist yet),
so a memory can only be used across sessions.

Replay, per human prompt in file order: `events.prompt_context` (the prompt
hook's own function: recall, relevance threshold, budget, muting), the ids it
injects recorded as the hook records them (`hotpath.note_injected`), then
`salience.judge` on that turn's events (the Stop path's own call): was the
memory used in the assistant's text or tool calls that followed?

Three passes, sessions in a fixed order, salience state carried from session
to session as a person's store would carry it:

- **off**: `salience.weight 0`, `mute_after 0` — the ranking before this work;
- **online**: salience on from an empty state, learning as the replay goes;
- **warm (leave-one-out)**: salience on, each session starting from what the
  *off* pass judged in all the other sessions;
- **warm, mute_after 2**: the same with a quicker mute (a sensitivity row; the
  default stays 3).

It prints, per pass, memories injected, used, and the share used.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pygit2

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
JUDGE_MS: list[float] = []  # each `salience.judge` call (the Stop path's extra work), in-process


def sessions(only: str | None) -> list[tuple[str, Path, Path | None]]:
    """(name, transcript, gold file or None) of every replayed session."""
    found: list[tuple[str, Path, Path | None]] = []
    for chat in sorted((DATA / "capture-dev").glob("*.chat.json")):
        gold = chat.with_name(chat.name.replace(".chat.json", ".gold.json"))
        found.append((chat.name.removesuffix(".chat.json"), chat, gold if gold.exists() else None))
    for path in sorted((DATA / "transcripts").rglob("*")):
        if path.suffix in (".jsonl", ".json") and "subagents" not in path.parts and path.is_file():
            found.append((f"{path.parent.name}/{path.stem}"[-40:], path, None))
    return [s for s in found if not only or only in s[0]]


def new_store(root: Path) -> Any:
    from cortex.store import Store

    pygit2.init_repository(str(root), initial_head="main")
    return Store.init(root / ".cortex")


def source_memories(name: str, transcript: Path, gold: Path | None, scratch: Path) -> list[Path]:
    """The memory files of one session: what capture writes from it, and its gold facts."""
    from cortex.capture import capture
    from cortex.memory import Memory, title_from_text

    store = new_store(scratch / name.replace("/", "_"))
    capture(store, transcript, session=name, from_start=True)
    if gold is not None:
        for fact in json.loads(gold.read_text(encoding="utf-8"))["items"]:
            text = fact["statement"]
            store.create(Memory(id="", type=fact["type"], title=title_from_text(text)[:120], body=text + "\n",
                                confidence=0.8, priority=6, tags=["gold"], source={"kind": "manual"}))
    return sorted(store.memories_dir.rglob("*.md"))


def store_without(name: str, files: dict[str, list[Path]], root: Path) -> Any:
    """A store holding every session's memory files but `name`'s, its cache built."""
    from cortex.index import Index

    store = new_store(root)
    for other, paths in files.items():
        if other == name:
            continue
        for path in paths:
            target = store.memories_dir / path.parent.name / path.name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
    Index(store).sync(full=True, progress=False)
    return store


def turns(transcript: Path) -> list[list[Any]]:
    """The session's events, cut at each human prompt: [prompt, what followed …]."""
    from cortex.capture import events

    if transcript.read_bytes()[:1] == b"[":
        records = [r for r in json.loads(transcript.read_text(encoding="utf-8")) if isinstance(r, dict)]
    else:
        records = []
        for line in transcript.read_text(encoding="utf-8").splitlines():
            try:
                item = json.loads(line)
            except ValueError:
                continue
            if isinstance(item, dict):
                records.append(item)
    out: list[list[Any]] = []
    for event in events(records):
        if event.kind == "human":
            out.append([event])
        elif out:
            out[-1].append(event)
    return [t for t in out if not t[0].text.startswith("/")]


def replay(store: Any, name: str, session_turns: list[list[Any]], state: dict[str, Any], settings: dict[str, Any]
           ) -> tuple[int, int, dict[str, Any]]:
    """Replay one session on `store` starting from salience `state`; (injected, used, state after)."""
    from cortex import salience
    from cortex.events import prompt_context
    from cortex.hotpath import note_injected
    from cortex.index import Indexes

    store.config_path.write_text("salience:\n" + "".join(f"  {k}: {v}\n" for k, v in settings.items()),
                                 encoding="utf-8")
    store.reload_config()
    salience._save(store, state)
    shutil.rmtree(store.state_dir / "injections", ignore_errors=True)
    indexes = Indexes()
    injected = used = 0
    for turn in session_turns:
        prompt = turn[0].text[:4000]
        context = prompt_context(store, prompt, indexes)
        if context:
            note_injected(str(store.root), {"session_id": name}, "UserPromptSubmit", context)
        started = time.perf_counter()
        verdict = salience.judge(store, name, turn)
        JUDGE_MS.append((time.perf_counter() - started) * 1000)
        injected += len(verdict.used) + len(verdict.ignored)
        used += len(verdict.used)
    return injected, used, salience.load(store)


def merged(deltas: dict[str, dict[str, Any]], leave_out: str) -> dict[str, Any]:
    """The usage counts every session but `leave_out` added (for the leave-one-out warm pass)."""
    total: dict[str, dict[str, int]] = {}
    for name, memories in deltas.items():
        if name == leave_out:
            continue
        for memory_id, counts in memories.items():
            into = total.setdefault(memory_id, {k: 0 for k in counts})
            for key, value in counts.items():
                into[key] = into.get(key, 0) + value
    return {"memories": total}


def delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, dict[str, int]]:
    keys = ("shown", "shown_at_prompt", "used", "ignored")
    old, new = before.get("memories", {}), after.get("memories", {})
    out = {}
    for memory_id, counts in new.items():
        prior = old.get(memory_id, {})
        change = {k: int(counts.get(k, 0)) - int(prior.get(k, 0)) for k in keys}
        if any(change.values()):
            out[memory_id] = change
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="Replay only sessions whose name contains this (all still feed the store).")
    parser.add_argument("--json", dest="json_out", help="Also write the numbers to this file.")
    args = parser.parse_args()
    started = time.perf_counter()
    every = sessions(None)
    replayed = [s for s in every if not args.only or args.only in s[0]]
    with tempfile.TemporaryDirectory(prefix="cortex-salience-bench-") as tmp:
        work = Path(tmp)
        import os

        os.environ["CORTEX_HOME"] = str(work / "home")  # no global store
        files = {name: source_memories(name, path, gold, work / "sources") for name, path, gold in every}
        print(f"store: {sum(len(v) for v in files.values())} memories from {len(files)} sessions "
              f"({sum(1 for *_x, g in every if g)} with gold facts)")
        stores = {name: store_without(name, files, work / "replay" / name.replace("/", "_")) for name, _p, _g in replayed}
        session_turns = {name: turns(path) for name, path, _g in replayed}
        print(f"replayed: {len(replayed)} sessions, {sum(len(t) for t in session_turns.values())} prompts")
        off = {"weight": 0, "mute_after": 0}
        on = {"weight": 0.3, "mute_after": 3}
        results: dict[str, dict[str, Any]] = {}
        deltas: dict[str, dict[str, Any]] = {}
        for label, settings in (("off", off), ("online", on)):
            state: dict[str, Any] = {}
            per: dict[str, tuple[int, int]] = {}
            for name, _p, _g in replayed:
                injected, used, after = replay(stores[name], name, session_turns[name], state, settings)
                if label == "off":
                    deltas[name] = delta(state, after)
                state = after
                per[name] = (injected, used)
            results[label] = {"per_session": per}
        for label, settings in (("warm (leave-one-out)", on), ("warm, mute_after 2", on | {"mute_after": 2})):
            per = {}
            for name, _p, _g in replayed:
                injected, used, _after = replay(stores[name], name, session_turns[name], merged(deltas, name), settings)
                per[name] = (injected, used)
            results[label] = {"per_session": per}
    print(f"\n{'session':<40} " + "  ".join(f"{label[:22]:>22}" for label in results))
    for name, _p, _g in replayed:
        cells = []
        for label in results:
            injected, used = results[label]["per_session"][name]
            cells.append(f"{used:>4}/{injected:<4} ({used / injected:5.0%})" if injected else f"{'0/0':>10}{'':>12}")
        print(f"{name:<40} " + "  ".join(f"{c:>22}" for c in cells))
    print()
    for label, data in results.items():
        injected = sum(i for i, _u in data["per_session"].values())
        used = sum(u for _i, u in data["per_session"].values())
        data.update(injected=injected, used=used, share=round(used / injected, 4) if injected else None)
        print(f"{label:<22} injected {injected:>5}  used {used:>5}  share used {used / injected if injected else 0:6.1%}")
    ordered = sorted(JUDGE_MS)
    print(f"\nsalience.judge per turn (what the Stop hook adds), in-process: median {ordered[len(ordered) // 2]:.1f} ms, "
          f"p95 {ordered[int(len(ordered) * 0.95)]:.1f} ms, max {ordered[-1]:.1f} ms over {len(ordered)} turns")
    print(f"{time.perf_counter() - started:.0f} s")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(results, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
