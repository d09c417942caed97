#!/usr/bin/env bash
# Makes the working tree small enough to travel with a test package to the device machine (the
# device tool carries at most 64 MiB, tree and package together; the tree is about 57 MB, a
# TESTS=cuda package about 15 MB):
#   scripts/carry_slim.sh out   moves the tokenizer goldens (5.6 MB, read by CPU tests only) and
#                               the demo tokenizer (11 MB) aside into dist/aside/, leaving the
#                               demo tokenizer as dist/demo-tokenizer.json.xz (1.4 MB), which
#                               gpu_env.sh unpacks in place on the device; carry that file
#   scripts/carry_slim.sh in    puts them back (run it before any commit)
set -euo pipefail
cd "$(dirname "$0")/.."
aside=dist/aside
tokenizer=tests/fixtures/qwen3-demo/tokenizer.json
case "${1:-}" in
  out)
    [ -e "$aside" ] && { echo "carry_slim: $aside exists: run 'in' first" >&2; exit 1; }
    mkdir -p "$aside/golden"
    xz -9 -c "$tokenizer" > dist/demo-tokenizer.json.xz
    mv tests/tokenizer/golden/* "$aside/golden/"
    mv "$tokenizer" "$aside/"
    ;;
  in)
    [ -d "$aside" ] || { echo "carry_slim: nothing aside" >&2; exit 1; }
    mv "$aside"/golden/* tests/tokenizer/golden/
    mv "$aside/tokenizer.json" "$tokenizer"
    rm -rf "$aside"
    ;;
  *)
    echo "usage: scripts/carry_slim.sh out|in" >&2
    exit 2
    ;;
esac
