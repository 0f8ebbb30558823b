#!/usr/bin/env bash
# The start race of issue 41, made wide and counted: hack/proc.sh starts a stand-in component
# (a copy of sleep(1) named stand-in) NAD_PROC_TEST_STARTS times [300] with a delay between the
# fork and the exec (NAD_PROC_EXEC_DELAY, 300 ms here), and each start is checked at once, inside
# that window, as hack/local-up.sh checks a component while it waits for its health. A check that
# goes by the program's name sees a shell there and calls a live component dead; the fix knows it
# by its pid and start time. Then: the recorded pid becomes the program (no fork in between), a
# component that exits is told with its exit status, one killed with its signal, one that cannot
# be executed with 127, a live pid with another start time (a reused pid) is not ours, and
# proc_stop stops what it started. hack/test-scripts.sh runs it (make test).
#
#   hack/test-proc-start.sh [HELPER]   HELPER [hack/proc.sh]: the file of helpers to test
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
helper="${1:-$repo/hack/proc.sh}"
starts="${NAD_PROC_TEST_STARTS:-300}"
# shellcheck source=hack/proc.sh
source "$helper"

work="$(mktemp -d)"
stand_ins=()
# shellcheck disable=SC2317 # the EXIT trap
cleanup() {
  local pid
  for pid in "${stand_ins[@]}"; do { kill -KILL "$pid" && wait "$pid"; } 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
cp "$(command -v sleep)" "$work/stand-in"
mkdir -p "$work/pids"
failed=0
fail() { echo "test-proc-start: FAIL: $*" >&2; failed=1; }
pass() { echo "test-proc-start: ok: $*" >&2; }

# The race: each start checked at once, inside the window between the fork and the exec.
missed=0
for i in $(seq "$starts"); do
  NAD_PROC_EXEC_DELAY=0.3 proc_start "$work/pids/stand-in.pid" "$work/stand-in.log" "$work/stand-in" 60
  proc_running "$work/pids/stand-in.pid" || missed=$((missed + 1))
  stand_ins+=("$(proc_pid "$work/pids/stand-in.pid")")
  cp "$work/pids/stand-in.pid" "$work/pids/stand-in-$i.pid"
done
if ((missed == 0)); then
  pass "$starts starts, each seen running at once, before its exec"
else
  fail "$missed of $starts starts were seen as not running at once, before their exec"
fi

# Each recorded pid is the program itself once the delay is over (setsid did not fork).
not_program=0
for i in $(seq "$starts"); do
  pid="$(proc_pid "$work/pids/stand-in-$i.pid")"
  deadline=$((SECONDS + 10))
  until [[ "$(readlink "/proc/$pid/exe" 2>/dev/null)" == "$work/stand-in" ]] || ((SECONDS >= deadline)); do
    sleep 0.05
  done
  [[ "$(readlink "/proc/$pid/exe" 2>/dev/null)" == "$work/stand-in" ]] || not_program=$((not_program + 1))
  proc_running "$work/pids/stand-in-$i.pid" || not_program=$((not_program + 1))
done
if ((not_program == 0)); then
  pass "each recorded pid runs the stand-in after its exec, and is still seen running"
else
  fail "$not_program recorded pids are not the running stand-in after their exec"
fi

# proc_stop stops the first 20 (TERM, and waits), and then they are not running; the rest are
# killed here.
stopped=0
for i in $(seq "$starts"); do
  if ((i <= 20)); then
    proc_stop "$work/pids/stand-in-$i.pid" stand-in 5 2>/dev/null
    proc_running "$work/pids/stand-in-$i.pid" || stopped=$((stopped + 1))
  else
    pid="$(proc_pid "$work/pids/stand-in-$i.pid")"
    { kill -KILL "$pid" && wait "$pid"; } 2>/dev/null || true
  fi
done
if ((stopped == 20)); then
  pass "proc_stop stops a component, which is then not running"
else
  fail "$((20 - stopped)) of 20 still seen running after proc_stop"
fi

if ! declare -F proc_exited >/dev/null; then
  fail "$helper has no proc_exited: a component that exits cannot be told from one that fails its health check"
  exit "$failed"
fi

# A component that exits: told with its exit status, and its log kept.
proc_start "$work/pids/exits.pid" "$work/exits.log" bash -c 'echo "fatal: the port is taken"; exit 3'
deadline=$((SECONDS + 10))
while proc_running "$work/pids/exits.pid" && ((SECONDS < deadline)); do sleep 0.05; done
proc_exited "$work/pids/exits.pid"
tail="$(proc_log_tail "$work/exits.log")"
if ! proc_running "$work/pids/exits.pid" && [[ "$proc_how" == "exited with status 3" && "$tail" == *"fatal: the port is taken"* ]]; then
  pass "a component that exits: '$proc_how', with its log's last lines"
else
  fail "a component that exits with status 3: running=$(proc_running "$work/pids/exits.pid" && echo yes || echo no), '$proc_how', tail: $tail"
fi

# One killed by a signal.
proc_start "$work/pids/killed.pid" "$work/killed.log" "$work/stand-in" 60
stand_ins+=("$proc_last")
kill -KILL "$proc_last"
deadline=$((SECONDS + 10))
while proc_running "$work/pids/killed.pid" && ((SECONDS < deadline)); do sleep 0.05; done
proc_exited "$work/pids/killed.pid"
if [[ "$proc_how" == "was killed by SIGKILL" ]]; then
  pass "a killed component: '$proc_how'"
else
  fail "a component killed by SIGKILL: '$proc_how'"
fi

# One that cannot be executed.
proc_start "$work/pids/missing.pid" "$work/missing.log" "$work/no-such-program"
deadline=$((SECONDS + 10))
while proc_running "$work/pids/missing.pid" && ((SECONDS < deadline)); do sleep 0.05; done
proc_exited "$work/pids/missing.pid"
if [[ "$proc_how" == "exited with status 127" ]]; then
  pass "a program that cannot be executed: '$proc_how'"
else
  fail "a program that cannot be executed: '$proc_how'"
fi

# A pid file naming a live process that started at another time (a pid reused since) is not ours.
echo "$$ 1" >"$work/pids/reused.pid"
if proc_running "$work/pids/reused.pid"; then
  fail "a live pid with another start time is taken for ours"
else
  pass "a live pid with another start time is not ours"
fi
# ... nor is a zombie: a child that has exited and that no one has reaped yet.
zombie="$(bash -c 'sleep 0.1 & exec sleep 1' >/dev/null 2>&1 & echo $!)"
# The inner sleep (0.1 s) is the zombie child of the outer one, which does not wait for it.
sleep 0.5
zombie_child="$(pgrep -P "$zombie" || true)"
if [[ -n "$zombie_child" ]] && [[ "$(awk '{print $3}' "/proc/$zombie_child/stat" 2>/dev/null)" == Z ]]; then
  proc_identity "$zombie_child" >"$work/pids/zombie.pid"
  if proc_running "$work/pids/zombie.pid"; then
    fail "a zombie is taken for a running component"
  else
    pass "a zombie is not running"
  fi
else
  fail "could not make a zombie to check (child: '${zombie_child}')"
fi

exit "$failed"
