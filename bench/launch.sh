#!/usr/bin/env bash
# Launch overhead of dlrun local vs torchrun; prints a Markdown table for docs/benchmarks.md.
# Usage: bench/launch.sh [path/to/dlrun]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
exec /usr/bin/python3 "$here/launch.py" "${1:-$here/../build/cli/dlrun}" "${@:2}"
