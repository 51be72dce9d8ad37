#!/usr/bin/env bash
# The real Stop hook on every shared/data/capture-dev session (and, with `all`, the other real transcripts):
# one fresh git repository per session (`cortex init`, default config, LLM layer off), then the set's score.py,
# then the number of memories per session. What the capture precision review reads.
#
#   bash bench/capture_precision.sh OUT [all]        # from the repository's top; OUT: a new folder
#
# DATA (default ../shared/data) and PYTHON (default python) may be set; this checkout comes first on PYTHONPATH.
set -euo pipefail
TREE=$(cd "$(dirname "$0")/.." && pwd)
OUT=$1; ALL=${2:-}
PY=${PYTHON:-python}
D=$(cd "${DATA:-$TREE/../shared/data}" && pwd)
rm -rf "$OUT"; mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
cortex() { PYTHONPATH="$TREE${PYTHONPATH:+:$PYTHONPATH}" "$PY" -m cortex "$@"; }
one() {  # NAME TRANSCRIPT
  local repo=$OUT/$1; mkdir -p "$repo"
  (cd "$repo" && git init -q -b main && git -c user.name=t -c user.email=t@t commit -q --allow-empty -m init &&
   cortex init >/dev/null &&
   printf '{"session_id":"s-%s","transcript_path":"%s","cwd":"%s","hook_event_name":"Stop","stop_hook_active":false}' \
     "$1" "$(cd "$(dirname "$2")" && pwd)/$(basename "$2")" "$PWD" | cortex hook stop)
}
pairs=()
for f in "$D"/capture-dev/*.chat.json; do
  n=$(basename "$f" .chat.json); one "$n" "$f"; pairs+=("$OUT/$n/.cortex/memories" "$D/capture-dev/$n.gold.json")
done
if [ "$ALL" = all ]; then
  for f in "$D"/transcripts/CoorpAcademy-serverless-plugins/logs/*/chat.json; do one x-coorp "$f"; done
  one x-drmaciver "$D/transcripts/DRMacIver-claude-reliability/stop-hook-reflection-first-stop/transcript.jsonl"
  for f in "$D"/transcripts/d-kimuson-claude-code-viewer/*.jsonl; do one x-dkimuson "$f"; done
  one x-marot-main "$D/transcripts/marot-spotter/8463c716-a2ea-4c14-9efa-87158ebd9f20.jsonl"
  one x-marot-short "$D/transcripts/marot-spotter/short.jsonl"
  one x-marot-sub "$D/transcripts/marot-spotter/subagent.jsonl"
  for f in "$D"/other-assistants/codex/rollout-*.jsonl "$D"/other-assistants/gemini/session-*.jsonl; do
    one "x-$(basename "$(dirname "$f")")-$(basename "$f" .jsonl)" "$f"
  done
fi
"$PY" "$D/capture-dev/score.py" "${pairs[@]}"
for repo in "$OUT"/*/; do
  printf '%s %s\n' "$(basename "$repo")" "$(find "$repo.cortex/memories" -name '*.md' 2>/dev/null | wc -l)"
done
