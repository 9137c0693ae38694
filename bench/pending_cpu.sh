#!/bin/sh
# CPU time the supervisors of waiting jobs use: one CPU job holds every slot (sleep), N more
# wait behind it; the supervisors' CPU ticks are summed over SECONDS.
#   bench/pending_cpu.sh DLRUN [N=100] [SECONDS=10]
set -eu
dlrun=$1; n=${2:-100}; seconds=${3:-10}
work=$(mktemp -d); trap 'DLRUN_HOME=$work/home "$dlrun" cancel $(seq 1 $((n + 1))) >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
export DLRUN_HOME=$work/home DLRUN_CPU_SLOTS=1
printf 'command = ["sleep", "600"]\n[resources]\nnproc = 1\n' > "$work/job.toml"
i=0; while [ $i -le "$n" ]; do "$dlrun" submit --parsable "$work/job.toml" >/dev/null; i=$((i + 1)); done
sleep 2
pids=$(pgrep -f "_supervise" | while read -r p; do
  if tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -qx "DLRUN_HOME=$work/home"; then echo "$p"; fi; done)
ticks() { for p in $pids; do awk '{print $14 + $15}' /proc/$p/stat 2>/dev/null; done | awk '{s += $1} END {print s + 0}'; }
before=$(ticks); sleep "$seconds"; after=$(ticks)
hz=$(getconf CLK_TCK)
echo "$(echo "$pids" | wc -w) supervisors, $n waiting: $(awk -v t=$((after - before)) -v hz="$hz" -v s="$seconds" 'BEGIN {printf "%.3f", t / hz / s}') of a core"
