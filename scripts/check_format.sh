#!/usr/bin/env bash
# Fails when a C++/CUDA file under src/, tests/ or bench/ differs from what clang-format (.clang-format,
# clang-format 14 as on Debian 12) would write. Fix with: scripts/check_format.sh --fix
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files 'src/*.cpp' 'src/*.h' 'src/*.cu' 'src/*.cuh' \
                                  'tests/*.cpp' 'tests/*.h' 'tests/*.cu' 'tests/*.cuh' \
                                  'bench/*.cpp' 'bench/*.h')
if [ "${1:-}" = "--fix" ]; then
  clang-format -i "${files[@]}"
  exit 0
fi
if ! clang-format --dry-run --Werror "${files[@]}" 2>/tmp/clang-format.$$; then
  grep -E '^[^ ].*: (error|warning):' /tmp/clang-format.$$ | cut -d: -f1 | sort -u | sed 's/^/unformatted: /'
  rm -f /tmp/clang-format.$$
  echo "format: run scripts/check_format.sh --fix" >&2
  exit 1
fi
rm -f /tmp/clang-format.$$
echo "format: ${#files[@]} files clean"
