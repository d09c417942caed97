#!/usr/bin/env bash
# Lints the /metrics body printed by $1 (metrics_sample), or read from stdin if $1 is '-'
# (the live server test), with `promtool check metrics`.
# The one finding allowed is "metric names should not contain ':'": vLLM's names (vllm:*, and
# MiniInfer's own miniinfer:* beside them) are the point of the format, and ':' is valid in the
# text format (promtool reserves it for recording rules by convention). Any other finding, a
# parse error, or fewer than all 15 families seen fails the test.
set -euo pipefail
if [ "$1" = - ]; then body=$(cat); else body=$("$1"); fi
rc=0
report=$(printf '%s\n' "$body" | promtool check metrics 2>&1) || rc=$?
echo "$report"
[ "$rc" -eq 0 ] || [ "$rc" -eq 3 ] || { echo "FAIL: promtool exit $rc (parse error?)"; exit 1; }
if grep -v "metric names should not contain ':'" <<<"$report" | grep -q .; then
  echo "FAIL: promtool found problems besides the ':' in vLLM's names"; exit 1
fi
families=$(grep -c "metric names should not contain ':'" <<<"$report" || true)
[ "$families" -eq 15 ] || { echo "FAIL: promtool saw $families metric families, expected 15"; exit 1; }
