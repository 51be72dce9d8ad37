"""Salience: how useful each memory has proved, judged at each Stop from what the assistant did after it was
shown, kept in `state/salience.json` (never a tracked file). docs/salience.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from cortex.errors import CortexError, MemoryNotFound
from cortex.files import atomic_write, file_lock, read_json
from cortex.layout import injections_file, subagent_tasks_file
from cortex.store import Store, iter_stores
from cortex.text import estimate_tokens, words

STATE_FILE = "salience.json"
LOCK_FILE = "salience.lock"
BRIEFING_TURNS = 3  # turns over which a briefing's memories may show their use
PROMPT_TURNS = 1
RATING_WEIGHT = 3
HOT_MIN_USES = 2
HOT_MIN_SCORE = 0.6
KEEP_CHANGES = 20  # promotions and demotions kept for `cortex status`
KEEP_EVIDENCE = 3
OPEN_SESSION_DAYS = 2  # a session's unjudged injections are dropped after this long
MAX_TURN_CHARS = 400_000  # what one turn's output is searched in
ID_IN_TEXT = re.compile(r"`([0-9a-f]{12})`")
_BACKTICK = re.compile(r"`([^`\n]{3,80})`")
_PATHLIKE = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)+[\w.-]+|[\w-]+\.(?:py|js|ts|tsx|jsx|go|rs|rb|java|kt|c|h|cpp|md|json|ya?ml|toml|"
                       r"ini|cfg|sh|sql|html|css|lock|txt))(?![\w/])")
_FLAG = re.compile(r"(?<![\w-])(--?[a-zA-Z][\w-]{2,})")
_IDENT = re.compile(r"\b([A-Za-z_][A-Za-z0-9]*(?:[_.][A-Za-z0-9]+)+|[A-Z][A-Z0-9]{2,}(?:_[A-Z0-9]+)*|[a-z]+[A-Z][A-Za-z0-9]+|"
                    r"[A-Z][a-z0-9]+[A-Z][A-Za-z0-9]*)\b")


@dataclass
class Usage:
    """One memory's record: how often it was shown, used, ignored and rated."""

    shown: int = 0
    shown_at_prompt: int = 0
    used: int = 0
    ignored: int = 0
    up: int = 0
    down: int = 0
    last_used: float | None = None
    evidence: list[str] = field(default_factory=list)  # the last few reasons it counted as used

    @classmethod
    def of(cls, data: Any) -> Usage:
        if not isinstance(data, dict):
            return cls()
        made = cls()
        for name in ("shown", "shown_at_prompt", "used", "ignored", "up", "down"):
            value = data.get(name, 0)
            setattr(made, name, value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0)
        last = data.get("last_used")
        made.last_used = float(last) if isinstance(last, (int, float)) and not isinstance(last, bool) else None
        evidence = data.get("evidence")
        made.evidence = [str(e) for e in evidence if isinstance(e, str)] if isinstance(evidence, list) else []
        return made

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}

    @property
    def score(self) -> float:
        good = self.used + RATING_WEIGHT * self.up
        bad = self.ignored + RATING_WEIGHT * self.down
        return (1 + good) / (2 + good + bad)


@dataclass
class Judgement:
    """What one Stop decided: the ids that counted as used (with why) and those ignored."""

    used: dict[str, str] = field(default_factory=dict)
    ignored: list[str] = field(default_factory=list)


# ---------------------------------------------------------------- state


def _state_path(store: Store) -> Path:
    return store.state_dir / STATE_FILE


def load(store: Store) -> dict[str, Any]:
    """The salience state (empty when missing or unreadable: it is derived, never precious)."""
    return _clean(read_json(_state_path(store)))


def _clean(data: Any) -> dict[str, Any]:
    """The state with every damaged part dropped (not trusted, not fatal): it is rebuilt by use."""
    if not isinstance(data, dict):
        return {}
    memories = found if isinstance(found := data.get("memories"), dict) else {}
    sessions = {}
    for name, session in found.items() if isinstance(found := data.get("sessions"), dict) else ():
        if isinstance(session, dict) and isinstance(session.get("offset", 0), int):
            opened = listed if isinstance(listed := session.get("open"), list) else []
            session["open"] = [o for o in opened if isinstance(o, dict) and isinstance(o.get("ids"), list)
                               and isinstance(o.get("turns", 1), int)]
            sessions[str(name)] = session
    tiers = found if isinstance(found := data.get("tiers"), dict) else {}
    hot = found if isinstance(found := tiers.get("hot"), list) else []
    changes = found if isinstance(found := tiers.get("changes"), list) else []
    return {"memories": {str(k): v for k, v in memories.items() if isinstance(v, dict)}, "sessions": sessions,
            "tiers": {"hot": [str(i) for i in hot if isinstance(i, str)],
                      "changes": [c for c in changes if isinstance(c, dict) and {"id", "to", "why"} <= set(c)]}}


def _save(store: Store, state: dict[str, Any]) -> None:
    atomic_write(_state_path(store), json.dumps(state, sort_keys=True, separators=(",", ":")), durable=False)


def usages(store: Store, state: dict[str, Any] | None = None) -> dict[str, Usage]:
    """Every memory's usage record, by id."""
    state = load(store) if state is None else state
    memories = state.get("memories")
    return {k: Usage.of(v) for k, v in memories.items()} if isinstance(memories, dict) else {}


def scores(store: Store) -> dict[str, float]:
    """Salience in 0..1 of every memory with a record (0.5 for the rest: use `.get(id, 0.5)`)."""
    return {k: u.score for k, u in usages(store).items()}


def _session_file(store: Store, session: str) -> Path:
    return Path(injections_file(str(store.root), session))


# ---------------------------------------------------------------- reading what the hooks recorded


def _new_injections(store: Store, session: str, offset: int) -> tuple[list[dict[str, Any]], int]:
    """The complete lines appended to the session's injection file since `offset`, and the new offset."""
    path = _session_file(store, session)
    try:
        with open(path, "rb") as handle:
            if os.fstat(handle.fileno()).st_size < offset:
                offset = 0  # replaced: read it again
            handle.seek(offset)
            data = handle.read()
    except OSError:
        return [], offset
    end = data.rfind(b"\n")
    lines = []
    for raw in (data[: end + 1] if end >= 0 else b"").split(b"\n"):
        try:
            item = json.loads(raw) if raw.strip() else None
        except ValueError:
            continue
        if isinstance(item, dict) and isinstance(item.get("ids"), list):
            lines.append(item)
    return lines, offset + (end + 1 if end >= 0 else 0)


# ---------------------------------------------------------------- judging use


def distinctive_terms(text: str) -> set[str]:
    """The terms of a memory that, seen in the output, show it was used: code spans, paths, flags, identifiers."""
    found: set[str] = set()
    for pattern in (_BACKTICK, _PATHLIKE, _FLAG, _IDENT):
        for match in pattern.findall(text):
            term = " ".join(str(match).split()).strip(" .,:;'\"").lower()
            if len(term) >= 4 and not ID_IN_TEXT.fullmatch(f"`{term}`"):
                found.add(term)
    return found


def _turn_output(items: Iterable[Any], agent: bool = False) -> tuple[str, str]:
    """(what the assistant wrote and called, what the person asked), lower-cased (`agent`: a sub-agent's own)."""
    out: list[str] = []
    asked: list[str] = []
    size = 0
    for event in items:
        kind = getattr(event, "kind", "")
        if getattr(event, "sidechain", False) and not agent:
            continue
        if kind == "human":
            asked.append(event.text)
            continue
        if kind == "text":
            piece = event.text
        elif kind == "tool":
            piece = json.dumps(event.tool_input, ensure_ascii=False)
        else:
            continue
        out.append(piece)
        size += len(piece)
        if size > MAX_TURN_CHARS:
            break
    return "\n".join(out).lower(), "\n".join(asked).lower()


def _stems(found: set[str]) -> set[str]:
    """Words without a version number or a plural/tense ending: `sqlite3` is `sqlite`, `caches` is `cache`."""
    out = set()
    for w in found:
        w = w.rstrip("0123456789") or w
        for suffix in ("ing", "ed", "es", "s"):
            if len(w) > len(suffix) + 3 and w.endswith(suffix):
                w = w[: -len(suffix)]
                break
        out.add(w)
    return out


def use_of(memory: Any, output: str, asked: str, said: set[str] | None = None, heard: set[str] | None = None
           ) -> str | None:
    """Why `memory` counts as used in a turn's `output` after the prompt `asked` (whose terms prove nothing), or
    None; `said`/`heard`: the stems of both, computed once by a caller judging many."""
    if not output:
        return None
    if memory.id in output:
        return f"its id {memory.id} was cited"
    for path in memory.files or ():
        rel = str(path).lower()
        if rel and rel in output and rel not in asked:
            return f"its file {path} was used"
    text = f"{memory.title}\n{memory.body}"
    for term in sorted(distinctive_terms(text), key=lambda t: (-len(t), t)):
        if term in output and term not in asked:
            return f"its term `{term}` appeared"
    key = _stems(words(f"{memory.title} {memory.body[:600]}")) - (heard if heard is not None else _stems(words(asked)))
    if len(key) >= 4:
        seen = key & (said if said is not None else _stems(words(output)))
        if len(seen) >= max(3, 0.5 * len(key)):
            return f"{len(seen)} of its {len(key)} key words appeared"
    return None


def _lookup(store: Store, memory_id: str) -> Any:
    for each in iter_stores(store):
        try:
            return each.get(memory_id)
        except Exception:
            continue
    return None


def judge(store: Store, session: str | None, items: list[Any], agent: str | None = None,
          now: float | None = None) -> Judgement:
    """Judge the memories shown to `session` (or its sub-agent `agent`) against the turn's events; tiers follow."""
    verdict = Judgement()
    if not session:
        return verdict
    now = time.time() if now is None else now
    with file_lock(store.state_dir / LOCK_FILE):
        state = load(store)
        sessions = state.setdefault("sessions", {})
        mine = sessions.setdefault(session, {"offset": 0, "open": []})
        fresh, mine["offset"] = _new_injections(store, session, int(mine.get("offset", 0)))
        memories = state.setdefault("memories", {})
        for line in fresh:
            event = str(line.get("event", ""))
            turns = BRIEFING_TURNS if event == "SessionStart" else PROMPT_TURNS
            mine["open"].append({"event": event, "ids": [str(i) for i in line["ids"]], "turns": turns,
                                 "agent": line.get("agent"), "at": line.get("at", now)})
            for memory_id in dict.fromkeys(str(i) for i in line["ids"]):
                usage = Usage.of(memories.get(memory_id))
                usage.shown += 1
                usage.shown_at_prompt += event == "UserPromptSubmit"
                memories[memory_id] = usage.to_dict()
        if not fresh and not any((shown.get("agent") or None) == agent for shown in mine["open"]):
            return verdict  # nothing shown is waiting for this turn: nothing to write
        output, asked = _turn_output(items, agent=agent is not None)
        said, heard = _stems(words(output)), _stems(words(asked))
        found: dict[str, Any] = {}
        still_open = []
        for shown in mine["open"]:
            if (shown.get("agent") or None) != agent:
                still_open.append(shown)  # the main session's and each sub-agent's are judged on their own turns
                continue
            waiting = []
            for memory_id in shown["ids"]:
                if memory_id not in found:
                    found[memory_id] = _lookup(store, memory_id)
                memory = found[memory_id]
                reason = use_of(memory, output, asked, said, heard) if memory is not None else None
                usage = Usage.of(memories.get(memory_id))
                if reason:
                    usage.used += 1
                    usage.last_used = now
                    usage.evidence = ([f"used after {shown['event']}: {reason}"] + usage.evidence)[:KEEP_EVIDENCE]
                    verdict.used[memory_id] = reason
                    memories[memory_id] = usage.to_dict()
                elif memory is not None:
                    waiting.append(memory_id)
            shown["ids"], shown["turns"] = waiting, int(shown["turns"]) - 1
            if shown["turns"] <= 0 or agent is not None:  # a sub-agent's run is one judgement
                for memory_id in waiting:
                    usage = Usage.of(memories.get(memory_id))
                    usage.ignored += 1
                    memories[memory_id] = usage.to_dict()
                    verdict.ignored.append(memory_id)
            elif waiting:
                still_open.append(shown)
        mine["open"] = still_open
        mine["seen"] = now
        _forget_old_sessions(store, state, now)
        if verdict.used or verdict.ignored:  # only these counts move a score, so only they can move a tier
            _retier(store, state, now)
        _save(store, state)
    return verdict


def judge_quietly(store: Store, session: str | None, items: list[Any], agent: str | None = None) -> Judgement:
    """`judge`, for the Stop path: an internal error is a log line, never a failed capture."""
    try:
        return judge(store, session, items, agent)
    except Exception as exc:
        store.log(f"salience: judging use failed: {exc!r}")
        return Judgement()


def _forget_old_sessions(store: Store, state: dict[str, Any], now: float) -> None:
    """Sessions without a Stop for `OPEN_SESSION_DAYS`: their open judgements and their files go."""
    sessions = state.get("sessions", {})
    for name in [n for n, s in sessions.items() if now - float(s.get("seen", now)) > OPEN_SESSION_DAYS * 86400]:
        del sessions[name]
        for path in (_session_file(store, name), Path(subagent_tasks_file(str(store.root), name))):
            with contextlib.suppress(OSError):
                path.unlink()


# ---------------------------------------------------------------- ratings


RATINGS = ("up", "down")


def feedback(store: Store, memory_id: str, rating: str, note: str | None = None) -> dict[str, Any]:
    """Rate a memory `up` (useful) or `down` (noise); returns its record and tier. The id may be a prefix."""
    if rating not in RATINGS:
        raise CortexError(f"rating: {rating!r} is not one of up, down")
    try:
        memory = store.get(memory_id)  # raises MemoryNotFound / AmbiguousId, naming the id
    except MemoryNotFound:
        memory = _lookup(store, memory_id)  # a global memory the project was shown
        if memory is None:
            raise
    with file_lock(store.state_dir / LOCK_FILE):
        state = load(store)
        memories = state.setdefault("memories", {})
        usage = Usage.of(memories.get(memory.id))
        setattr(usage, rating, getattr(usage, rating) + 1)
        if note:
            usage.evidence = ([f"rated {rating}: {' '.join(note.split())[:120]}"] + usage.evidence)[:KEEP_EVIDENCE]
        memories[memory.id] = usage.to_dict()
        _retier(store, state, time.time())
        _save(store, state)
    return {"id": memory.id, "title": memory.title, "rating": rating, "salience": round(usage.score, 3),
            "tier": tier_of(state, memory)} | usage.to_dict()


# ---------------------------------------------------------------- tiers


def muted(store: Store, state: dict[str, Any] | None = None) -> set[str]:
    """Memories the prompt hook no longer injects: shown `salience.mute_after` times unused, or rated down more."""
    after = int(store.config().get("salience.mute_after"))
    out = set()
    for memory_id, usage in usages(store, state).items():
        never = after > 0 and usage.shown_at_prompt >= after and usage.used == 0 and usage.up == 0
        if never or usage.down > usage.up:
            out.add(memory_id)
    return out


def hot_ids(store: Store, state: dict[str, Any] | None = None) -> list[str]:
    """The hot tier's unpinned members, best first, as last computed (pinned memories are always hot)."""
    return _hot_of(load(store) if state is None else state)


def _hot_of(state: dict[str, Any]) -> list[str]:
    tiers = state.get("tiers")
    return [str(i) for i in tiers.get("hot", [])] if isinstance(tiers, dict) else []


def _retier(store: Store, state: dict[str, Any], now: float) -> None:
    """Recompute the hot set within `salience.hot_tokens`, record the changes, and drop a stale cached briefing."""
    budget = int(store.config().get("salience.hot_tokens"))
    usage_by_id = usages(store, state)
    hot, used = [], 0
    good = [(u.score, u.used + u.up, i) for i, u in usage_by_id.items()
            if (u.used >= HOT_MIN_USES or u.up > 0) and u.score >= HOT_MIN_SCORE and u.down <= u.up]
    for _s, _n, memory_id in sorted(good, key=lambda t: (-t[0], -t[1], t[2])):
        memory = _lookup(store, memory_id)
        if memory is None or memory.status != "active" or memory.pinned:
            continue
        cost = estimate_tokens(f"- [{memory.type}] {memory.title} `{memory.id}`\n")
        if used + cost > budget:
            break  # best first: the set is full (and a Stop reads no more memory files than fit)
        hot.append(memory.id)
        used += cost
    tiers = state.setdefault("tiers", {})
    before = [str(i) for i in tiers.get("hot", [])]
    changes = list(tiers.get("changes", []))
    for memory_id in hot:
        if memory_id not in before:
            u = usage_by_id[memory_id]
            changes.append({"id": memory_id, "to": "hot", "at": now,
                            "why": f"used {u.used} of {u.shown} times shown, rated +{u.up}/-{u.down}, salience {u.score:.2f}"})
    for memory_id in before:
        if memory_id not in hot:
            u = usage_by_id.get(memory_id, Usage())
            why = (f"salience fell to {u.score:.2f} (used {u.used}, ignored {u.ignored}, rated +{u.up}/-{u.down})"
                   if memory_id in usage_by_id else "no longer active")
            changes.append({"id": memory_id, "to": "cold", "at": now, "why": why})
    tiers["hot"], tiers["changes"] = hot, changes[-KEEP_CHANGES:]
    if hot != before:
        for name in ("briefing.json", "briefing.next.json"):  # and the one `cortex serve` built ahead
            with contextlib.suppress(OSError):
                (store.state_dir / name).unlink()


def tier_of(state: dict[str, Any], memory: Any) -> str:
    if memory.pinned:
        return "hot (pinned)"
    return "hot" if memory.id in _hot_of(state) else "cold"


def tiers_report(store: Store) -> dict[str, Any]:
    """For `cortex status`: the hot set (pinned + most used), counts, and the latest promotions and demotions."""
    state = load(store)
    usage_by_id = usages(store, state)
    tiers = state.get("tiers") if isinstance(state.get("tiers"), dict) else {}
    shown = sum(u.shown for u in usage_by_id.values())
    used = sum(u.used for u in usage_by_id.values())
    return {"hot": hot_ids(store, state), "budget_tokens": int(store.config().get("salience.hot_tokens")),
            "tracked": len(usage_by_id), "shown": shown, "used": used,
            "muted": sorted(muted(store, state)),
            "changes": list(tiers.get("changes", []))[-5:] if isinstance(tiers, dict) else []}


# ---------------------------------------------------------------- explaining a rank


def explain(store: Store, memory: Any, parts: dict[str, float]) -> dict[str, Any]:
    """Why `memory` ranks where it does: its prior's terms, salience record, tier, and whether it is muted."""
    state = load(store)
    usage = usages(store, state).get(memory.id, Usage())
    return {"prior": round(sum(parts.values()), 4), "parts": {k: round(v, 4) for k, v in parts.items()},
            "salience": round(usage.score, 3), "usage": usage.to_dict(), "tier": tier_of(state, memory),
            "muted": memory.id in muted(store, state)}


def explain_lines(info: dict[str, Any]) -> list[str]:
    """`explain` for a person: one line each."""
    u = info["usage"]
    parts = ", ".join(f"{k} {v:+.3f}" for k, v in info["parts"].items())
    lines = [f"rank: prior {info['prior']:.3f} = {parts}",
             f"salience {info['salience']:.2f}: shown {u['shown']} times ({u['shown_at_prompt']} at prompt time), "
             f"used {u['used']}, ignored {u['ignored']}, rated +{u['up']}/-{u['down']}"
             + ("" if u["shown"] or u["up"] or u["down"] else " (no history: neutral)"),
             f"tier: {info['tier']}" + ("; muted at prompt time (shown often, never used)" if info["muted"] else "")]
    lines += [f"  {e}" for e in u["evidence"]]
    return lines
