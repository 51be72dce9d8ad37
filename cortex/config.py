"""`.cortex/config.yaml`: documented defaults, merged with what a person sets.

A bad or unknown value is reported and its default used, so a hook never breaks on it. A project's file
never names a command to run (`cortex.llm`). docs/configuration.md.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from stat import S_ISREG
from typing import Any

from cortex.errors import ConfigError

DEFAULTS: dict[str, Any] = {
    "store": {"max_memory_bytes": 262144},
    "briefing": {"budget_tokens": 500},
    "recall": {"limit": 10, "rrf_k": 60, "list_weights": {"bm25": 1.0, "dense": 0.5}, "bm25_floor": 0.5,
               "contextual": True, "prior_weight": 0.1,
               "weights": {"confidence": 0.5, "priority": 0.2, "centrality": 0.15, "access": 0.15, "same_branch": 0.1}},
    "prompt": {"max_memories": 5, "budget_tokens": 300, "min_cosine": 0.48, "min_cosine_with_words": 0.3,
               "min_match": 0.45},
    "salience": {"weight": 0.3, "hot_tokens": 150, "mute_after": 3},
    "capture": {"layers": ["structural", "keyword", "self_report"], "llm": "off", "llm_command": "claude -p",
                "dedup_cosine": 0.9, "max_message_chars": 20_000, "gate": "on"},
    "graph": {"link_min": 0.1, "link_max": 0.5, "max_links": 5, "suggest_min": 0.07, "link_half_life_days": 90},
    "consolidate": {"auto_threshold": 0.64, "manual_threshold": 0.55, "candidate_threshold": 0.5, "max_judged": 500,
                    "max_judged_by_hand": 5000, "every_captures": 10, "max_active": 80},
    "gc": {"archive_below": 0.3, "archive_after_days": 14, "remove_after_days": 30},
    "git": {"on_stop": "stage", "pre_push": "warn"},
    "embedding": {"model": "bundled"},
}

# The file `cortex init` writes: every default, with a line on what it does.
TEMPLATE = """\
# cortex configuration. Every key is optional: these are the defaults.
# Unknown keys are reported by `cortex status`, never fatal.

store:
  max_memory_bytes: 262144  # 256 KiB: a larger memory file is refused on write, and reported (never read) by status

briefing:
  budget_tokens: 500        # session-start briefing size (about 4 characters a token)

recall:
  limit: 10                 # results `cortex recall` returns
  rrf_k: 60                 # reciprocal-rank-fusion constant for full-text + semantic
  list_weights: {bm25: 1.0, dense: 0.5}   # weight of each ranked list in the fusion
  bm25_floor: 0.5           # drop full-text hits scoring under this fraction of the best one
  contextual: true          # re-rank with the bundled transformer in cortex serve, the MCP server and cortex recall
  prior_weight: 0.1         # score = relevance (0..1) + prior_weight x prior (0..1)
  weights:                  # the prior's parts (normalised by their sum)
    confidence: 0.5
    priority: 0.2
    centrality: 0.15
    access: 0.15
    same_branch: 0.1

prompt:                     # UserPromptSubmit: memories relevant to the prompt
  max_memories: 5
  budget_tokens: 300
  min_cosine: 0.48          # this close in meaning to count without a word in common
  min_cosine_with_words: 0.3   # a shared word counts only this close in meaning (not another sense of it)
  min_match: 0.45           # inject only hits matching at least this (0..1), served or not

salience:                   # learned from use: was a memory the hooks showed used in the turns after? (docs/salience.md)
  weight: 0.3               # the prior gains weight x (salience - 0.5); a memory never shown is unaffected
  hot_tokens: 150           # the hot tier (the most used memories, besides pinned ones) always in the briefing, within this
  mute_after: 3             # the prompt hook stops showing a memory shown this often and never used (0: never)

capture:
  layers: [structural, keyword, self_report]   # from Claude Code transcripts
  llm: off                  # off | auto | on: LLM extraction, run detached. In a project: a request, allowed on a machine by capture.llm in $CORTEX_HOME/config.yaml or CORTEX_LLM
  llm_command: claude -p    # read only from $CORTEX_HOME/config.yaml or CORTEX_LLM_COMMAND: a project's is ignored
  dedup_cosine: 0.9         # a candidate this close (cosine) to a memory of its type is a duplicate
  max_message_chars: 20000  # capture reads at most this much of one message, and no captured body is longer
  gate: on                  # on: what capture finds without a [MEMORY: ...] tag is proposed, for `cortex inbox`; off: written active

graph:                      # links made when a memory is written
  link_min: 0.1             # similarity (cosine, or word overlap without vectors) from which memories are related
  link_max: 0.5             # ... up to which (above: near-duplicates, flagged for consolidation instead)
  max_links: 5              # at most this many relates_to links per new memory (the strongest)
  suggest_min: 0.07         # similarity from here up to link_min: a suggested link, listed by `cortex links --suggested`, not written
  link_half_life_days: 90   # a link's strength halves over this many days in which neither end is recalled (read time only)

consolidate:                # merging near-duplicate memories of the same type
  candidate_threshold: 0.5  # same-type memories this similar (as links measure) are possible duplicates ...
  auto_threshold: 0.64      # ... merged after capture when their duplicate score is at least this
  manual_threshold: 0.55    # ... proposed by `cortex consolidate` from this duplicate score (it asks per group)
  max_judged: 500           # memories one automatic run may encode to judge; the rest wait for the next
  max_judged_by_hand: 5000  # ... and one `cortex consolidate`
  every_captures: 10        # automatic run after this many captured memories ...
  max_active: 80            # ... or whenever more than this many memories are active

gc:                         # lifecycle (`cortex gc`; after capture in the global store)
  archive_below: 0.3        # archive when the decayed confidence has stayed under this ...
  archive_after_days: 14    # ... for this many days
  remove_after_days: 30     # archived and untouched this long: the file leaves the working tree (git keeps it)

git:
  on_stop: stage            # stage | off: what the Stop hook does with the memories it wrote (never a commit)
  pre_push: warn            # warn | block: a stale projection on push is named (block: and the push stops)

embedding:
  model: bundled            # bundled, or a path to a local model2vec folder
"""


@dataclass
class Config:
    data: dict[str, Any]
    warnings: list[str] = field(default_factory=list)  # every line `cortex status` shows: unknown keys, bad values
    invalid: list[str] = field(default_factory=list)  # the bad values among them (their defaults are used)

    def get(self, dotted: str) -> Any:
        node: Any = self.data
        for part in dotted.split("."):
            node = node[part]
        return node


def _merge(defaults: dict[str, Any], given: dict[str, Any], prefix: str, warnings: list[str],
           invalid: list[str]) -> dict[str, Any]:
    """The defaults with what `given` sets, each value checked (`_checked`): a bad one keeps its default."""
    out = copy.deepcopy(defaults)
    for key, value in given.items():
        name = f"{prefix}{key}"
        if key not in defaults:
            warnings.append(f"unknown key '{name}' (ignored)")
            continue
        if isinstance(defaults[key], dict):
            if isinstance(value, dict):
                out[key] = _merge(defaults[key], value, f"{name}.", warnings, invalid)
            else:
                invalid.append(f"{name} must be a mapping, got {_shown(value)} (defaults used)")
            continue
        checked, problem = _checked(name, value, defaults[key])
        if problem is None:
            out[key] = checked
        else:
            invalid.append(f"{name} must be {problem}, got {_shown(value)} (default {_shown(defaults[key])} used)")
    return out


# What a setting may be beyond its default's type (an int, a number, a word, a list of words): numbers
# within (low, high), None for no bound; words from a list. Anything else falls back to the default.
FRACTIONS = ("recall.bm25_floor", "prompt.min_match", "capture.dedup_cosine", "graph.link_min", "graph.link_max",
             "graph.suggest_min", "consolidate.auto_threshold", "consolidate.manual_threshold",
             "consolidate.candidate_threshold", "gc.archive_below")
AT_LEAST_ONE = ("briefing.budget_tokens", "graph.link_half_life_days", "consolidate.max_judged",
                "consolidate.max_judged_by_hand", "consolidate.every_captures")
RANGES: dict[str, tuple[float | None, float | None]] = {
    **dict.fromkeys(FRACTIONS, (0, 1)), **dict.fromkeys(AT_LEAST_ONE, (1, None)),
    "store.max_memory_bytes": (1024, None), "recall.limit": (1, 1000), "capture.max_message_chars": (1000, None),
    "prompt.min_cosine": (-1, 1), "prompt.min_cosine_with_words": (-1, 1),
}
CHOICES: dict[str, tuple[str, ...]] = {
    "capture.llm": ("off", "auto", "on"),
    "capture.gate": ("on", "off"),
    "git.on_stop": ("stage", "off", "commit"),  # commit: an older setting, read as stage (cortex never commits)
    "git.pre_push": ("warn", "block", "commit", "check"),  # commit, check: older names of warn, block
}
CAPTURE_LAYERS = ("structural", "keyword", "self_report")  # the local layers of cortex.capture
NO_BOUND = (0, None)  # every other number: counts, weights, days and token budgets are never negative


def _checked(name: str, value: Any, default: Any) -> tuple[Any, str | None]:
    """(the value as cortex uses it, None) or (None, what it must be)."""
    if isinstance(default, bool):
        return (value, None) if isinstance(value, bool) else (None, "true or false")
    if isinstance(default, (int, float)):
        return _number(name, value, integer=isinstance(default, int))
    if name in CHOICES:
        words = CHOICES[name]
        if isinstance(value, bool):  # `llm: false`, `on_stop: false`: YAML's booleans for on and off
            value = "on" if value else "off"
        if isinstance(value, str):
            word = {"true": "on", "false": "off"}.get(value.lower(), value.lower())
            if word in words:
                return word, None
        return None, "one of " + ", ".join(words)
    if isinstance(default, str):
        return (value, None) if isinstance(value, str) and value.strip() else (None, "a non-empty string")
    if name == "capture.layers":
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            return None, "a list of layers (" + ", ".join(CAPTURE_LAYERS) + ")"
        unknown = [v for v in value if v.replace("-", "_") not in CAPTURE_LAYERS]
        return (value, None) if not unknown else (None, "a list of layers from " + ", ".join(CAPTURE_LAYERS))
    return value, None  # pragma: no cover - every setting is one of the kinds above


def _number(name: str, value: Any, integer: bool) -> tuple[Any, str | None]:
    low, high = RANGES.get(name, NO_BOUND)
    kind = "an integer" if integer else "a number"
    if low is not None and high is not None:
        kind += f" from {low:g} to {high:g}"
    elif low is not None:
        kind += f" of at least {low:g}"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None, kind
    if integer and not (isinstance(value, int) or float(value).is_integer()):
        return None, kind
    number = int(value) if integer else float(value)
    if (low is not None and not low <= number) or (high is not None and not number <= high):  # NaN fails both
        return None, kind
    return number, None


def _shown(value: Any) -> str:
    """A value as a person wrote it, short: 'ten', 5, [1, 2], nothing."""
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return "true" if value else "false"
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 40 else text[:39] + "…"


def load_config(path: Path) -> Config:
    """Read a config file (missing: all defaults)."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        return Config(copy.deepcopy(DEFAULTS))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror})") from None
    if not S_ISREG(stat.st_mode) or stat.st_size > MAX_CONFIG_BYTES:  # a committed link to /dev/zero, a FIFO: unread
        raise ConfigError(f"{path}: not a regular file of at most {MAX_CONFIG_BYTES:,} bytes; it should hold YAML "
                          f"settings")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start}); it should hold YAML settings") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror})") from None
    return _parse(path, text)


MAX_CONFIG_BYTES = 1 << 20  # a config.yaml is a few kilobytes


def _parse(path: Path, text: str) -> Config:
    from ruamel.yaml.error import YAMLError

    from cortex.memory import AnchorFound, no_alias_yaml

    try:
        given = no_alias_yaml().load(text) or {}
    except AnchorFound:
        raise ConfigError(f"{path}: YAML anchors and aliases are not allowed in config.yaml") from None
    except YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(given, dict):
        raise ConfigError(f"{path}: expected a mapping of settings")
    warnings: list[str] = []
    invalid: list[str] = []
    _migrate(given)
    data = _merge(DEFAULTS, given, "", warnings, invalid)
    invalid = [f"{path.name}: {line}" for line in invalid]
    return Config(data, [f"{path.name}: {w}" for w in warnings] + invalid, invalid)


def _migrate(given: dict[str, Any]) -> None:
    """Read a config written by an older cortex as it meant: the `consolidate` template of before the duplicate score
    (`auto_threshold: 0.7`, `manual_threshold: 0.5`, no `candidate_threshold`) gives way to the new defaults, which
    mean something else on the new scale. A value a person changed is kept."""
    section = given.get("consolidate")
    if isinstance(section, dict) and "candidate_threshold" not in section \
            and section.get("auto_threshold") == 0.7 and section.get("manual_threshold") == 0.5:
        del section["auto_threshold"], section["manual_threshold"]
