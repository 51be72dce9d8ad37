"""`.cortex/config.yaml`: documented defaults, merged with what a person sets.

Every key is optional. Unknown keys are reported as warnings, never fatal,
so a config written by a newer cortex still works with an older one.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cortex.errors import ConfigError

DEFAULTS: dict[str, Any] = {
    "briefing": {
        "budget_tokens": 500,
    },
    "recall": {
        "limit": 10,
        "rrf_k": 60,
        "list_weights": {"bm25": 1.0, "dense": 0.5},
        "bm25_floor": 0.5,
        "prior_weight": 0.1,
        "weights": {
            "confidence": 0.5,
            "priority": 0.2,
            "centrality": 0.15,
            "access": 0.15,
            "same_branch": 0.1,
        },
    },
    "prompt": {
        "max_memories": 5,
        "budget_tokens": 300,
        "min_cosine": 0.48,
        "min_cosine_with_words": 0.3,
    },
    "capture": {
        "layers": ["structural", "keyword", "self_report"],
        "llm": "off",
        "llm_command": "claude -p",
        "dedup_cosine": 0.9,
    },
    "graph": {
        "link_min": 0.1,
        "link_max": 0.5,
        "max_links": 5,
    },
    "consolidate": {
        "auto_threshold": 0.64,
        "manual_threshold": 0.55,
        "candidate_threshold": 0.5,
        "max_judged": 500,
        "max_judged_by_hand": 5000,
        "every_captures": 10,
        "max_active": 80,
    },
    "gc": {
        "archive_below": 0.3,
        "archive_after_days": 14,
        "remove_after_days": 30,
    },
    "git": {
        "on_stop": "stage",
        "pre_push": "commit",
    },
    "embedding": {
        "model": "bundled",
    },
}

# The file `cortex init` writes: every default, with a line on what it does.
TEMPLATE = """\
# cortex configuration. Every key is optional: these are the defaults.
# Unknown keys are reported by `cortex status`, never fatal.

briefing:
  budget_tokens: 500        # session-start briefing size (about 4 characters a token)

recall:
  limit: 10                 # results `cortex recall` returns
  rrf_k: 60                 # reciprocal-rank-fusion constant for full-text + semantic
  list_weights: {bm25: 1.0, dense: 0.5}   # weight of each ranked list in the fusion
  bm25_floor: 0.5           # drop full-text hits scoring under this fraction of the best one
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

capture:
  layers: [structural, keyword, self_report]   # from Claude Code transcripts
  llm: off                  # off | auto | on: LLM extraction, run detached
  llm_command: claude -p
  dedup_cosine: 0.9         # a candidate this close (cosine) to a memory of its type is a duplicate

graph:                      # links made when a memory is written
  link_min: 0.1             # similarity (cosine, or word overlap without vectors) from which memories are related
  link_max: 0.5             # ... up to which (above: near-duplicates, flagged for consolidation instead)
  max_links: 5              # at most this many relates_to links per new memory (the strongest)

consolidate:                # merging near-duplicate memories of the same type
  candidate_threshold: 0.5  # same-type memories this similar (as links measure) are possible duplicates ...
  auto_threshold: 0.64      # ... merged after capture when their duplicate score is at least this
  manual_threshold: 0.55    # ... proposed by `cortex consolidate` from this duplicate score (it asks per group)
  max_judged: 500           # memories one automatic run may encode to judge (~3-15 s); the rest wait for the next
  max_judged_by_hand: 5000  # ... and one `cortex consolidate` (~30 s-3 min)
  every_captures: 10        # automatic run after this many captured memories ...
  max_active: 80            # ... or whenever more than this many memories are active

gc:                         # lifecycle (`cortex gc`, also after capture)
  archive_below: 0.3        # archive when the decayed confidence has stayed under this ...
  archive_after_days: 14    # ... for this many days
  remove_after_days: 30     # archived and untouched this long: the file leaves the working tree (git keeps it)

git:
  on_stop: stage            # stage | commit | off: what the Stop hook does with new memories
  pre_push: commit          # commit | check: stale projections on push

embedding:
  model: bundled            # bundled, or a path to a local model2vec folder
"""


@dataclass
class Config:
    data: dict[str, Any]
    warnings: list[str] = field(default_factory=list)

    def get(self, dotted: str) -> Any:
        node: Any = self.data
        for part in dotted.split("."):
            node = node[part]
        return node


def _merge(defaults: dict[str, Any], given: dict[str, Any], prefix: str, warnings: list[str]) -> dict[str, Any]:
    out = copy.deepcopy(defaults)
    for key, value in given.items():
        name = f"{prefix}{key}"
        if key not in defaults:
            warnings.append(f"unknown key '{name}' (ignored)")
            continue
        if isinstance(defaults[key], dict):
            if isinstance(value, dict):
                out[key] = _merge(defaults[key], value, f"{name}.", warnings)
            else:
                warnings.append(f"'{name}' should be a mapping (default used)")
        else:
            out[key] = value
    return out


def load_config(path: Path, cache_dir: Path | None = None) -> Config:
    """Read a config file; a missing file means all defaults.

    With `cache_dir`, the merged result is kept there as marshal keyed by the
    file's stat: importing ruamel.yaml alone costs a fresh process ~40 ms.
    """
    try:
        stat = path.stat()
    except FileNotFoundError:
        return Config(copy.deepcopy(DEFAULTS))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror})") from None
    key = (SCHEMA, stat.st_mtime_ns, stat.st_size, stat.st_ino)
    cached = _read_cached(cache_dir, key) if cache_dir is not None else None
    if cached is not None:
        return cached
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror})") from None
    config = _parse(path, text)
    if cache_dir is not None:
        _write_cached(cache_dir, key, config)
    return config


SCHEMA = 9  # bump when DEFAULTS change shape, so cached configs are re-read


def _cache_file(cache_dir: Path) -> Path:
    return cache_dir / "config.marshal"


def _read_cached(cache_dir: Path, key: tuple[int, ...]) -> Config | None:
    import importlib.util
    import marshal

    try:
        raw = _cache_file(cache_dir).read_bytes()
        magic = importlib.util.MAGIC_NUMBER
        if not raw.startswith(magic):
            return None
        stored_key, data, warnings = marshal.loads(raw[len(magic):])
    except (OSError, ValueError, EOFError, TypeError):
        return None
    return Config(data, list(warnings)) if tuple(stored_key) == key else None


def _write_cached(cache_dir: Path, key: tuple[int, ...], config: Config) -> None:
    import importlib.util
    import marshal

    from cortex.files import atomic_write

    try:
        atomic_write(_cache_file(cache_dir), importlib.util.MAGIC_NUMBER + marshal.dumps((key, config.data, config.warnings)))
    except (OSError, ValueError):
        pass  # not cacheable (read-only store, odd values): read it each time


def _parse(path: Path, text: str) -> Config:
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    try:
        given = YAML(typ="safe", pure=True).load(text) or {}
    except YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(given, dict):
        raise ConfigError(f"{path}: expected a mapping of settings")
    warnings: list[str] = []
    _migrate(given)
    data = _merge(DEFAULTS, given, "", warnings)
    return Config(data, [f"{path.name}: {w}" for w in warnings])


def _migrate(given: dict[str, Any]) -> None:
    """Read a config written by an older cortex as it meant.

    Before consolidation had a duplicate score, `cortex init` wrote `auto_threshold: 0.7` and
    `manual_threshold: 0.5` — thresholds on a cosine. A `consolidate` section without
    `candidate_threshold` (which every newer config has) holding both values is that template: they give
    way to the duplicate score's defaults, since 0.7/0.5 mean something else on that scale. A value a person
    changed is kept (both are then kept).
    """
    section = given.get("consolidate")
    if isinstance(section, dict) and "candidate_threshold" not in section \
            and section.get("auto_threshold") == 0.7 and section.get("manual_threshold") == 0.5:
        del section["auto_threshold"], section["manual_threshold"]
