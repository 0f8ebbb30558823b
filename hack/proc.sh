# Sourced by the scripts that start long-running components (hack/local-up.sh, hack/nodes.sh)
# and by those that look after them (hack/local-down.sh, hack/test.sh, hack/demo.sh): one way to
# start a process, to tell whether it still runs, and to say what became of it.
#
# A started process is known by its pid and its start time (field 22 of /proc/<pid>/stat, in
# clock ticks since boot), both fixed when it is forked: neither changes when it execs its
# program, and a pid the kernel hands to another process later comes with another start time.
# So the check holds from the first instant, before the exec as after it, and is never fooled by
# a reused pid. (A name read from /proc/<pid>/cmdline is not fixed: before the exec it is the
# shell's, which is how a starting kube-controller-manager was once taken for a dead one.)
#
#   proc_start PIDFILE LOG PROGRAM [ARG...]
#       starts PROGRAM in a session of its own (it outlives the caller and no terminal's Ctrl-C
#       reaches it), stdin from /dev/null, output appended to LOG, fd 9 (the scripts' lock)
#       closed; writes "<pid> <start time>" to PIDFILE before it returns; sets proc_last (its pid).
#   proc_running PIDFILE     true while the process PIDFILE records lives (a zombie does not)
#   proc_pid PIDFILE         prints the pid PIDFILE records
#   proc_exited PIDFILE      sets proc_how to how it ended: "exited with status N" or "was
#                            killed by SIGx" when this shell started it, else "is gone" (call
#                            it in this shell, not in $(...): only this shell can wait for it)
#   proc_stop PIDFILE NAME GRACE   TERM, KILL after GRACE seconds, returns once it is gone; its
#                            messages (stderr) start with $proc_prefix
#   proc_log_tail LOG        the log's last lines, indented, for a failure message
#
# NAD_PROC_EXEC_DELAY (seconds; tests only) delays each start between the fork and the exec of
# the program, which widens the window a name-based check fell into (hack/test-proc-start.sh).
# shellcheck shell=bash

proc_children=()
# shellcheck disable=SC2034 # proc_how and proc_last are read by the scripts that source this
proc_how=""
proc_prefix="" # before proc_stop's messages, e.g. "local-down: "

# The fields of /proc/$1/stat after the command name (which may hold spaces and parentheses):
# [0] is the state, [19] the start time.
proc_stat_fields() {
  local stat
  { read -r stat <"/proc/$1/stat"; } 2>/dev/null || return 1
  read -ra proc_fields <<<"${stat##*) }"
  ((${#proc_fields[@]} > 19))
}

# Prints "<pid> <start time>" of a live process.
proc_identity() {
  local proc_fields
  proc_stat_fields "$1" || return 1
  echo "$1 ${proc_fields[19]}"
}

proc_start() {
  local pidfile="$1" log="$2"
  shift 2
  local delay="${NAD_PROC_EXEC_DELAY:-}"
  if [[ -n "$delay" ]]; then
    # shellcheck disable=SC2016 # expanded by the inner shell
    set -- bash -c 'sleep "$0"; exec "$@"' "$delay" "$@"
  fi
  # Without job control a background job shares the script's process group, so setsid(1) needs
  # no fork of its own and $! is the very process that becomes the program.
  setsid "$@" </dev/null >>"$log" 2>&1 9>&- &
  proc_last=$!
  proc_children+=("$proc_last")
  local identity
  if ! identity="$(proc_identity "$proc_last")"; then
    # Gone already (a program that could not be executed): the start time is lost with it, and
    # a pid alone names it; proc_running will say it is not running, proc_exited how it ended.
    identity="$proc_last 0"
  fi
  echo "$identity" >"$pidfile.tmp"
  mv -f "$pidfile.tmp" "$pidfile"
}

# Reads PIDFILE into the caller's pid and start; false without a pid in it.
proc_recorded() {
  { read -r pid start <"$1"; } 2>/dev/null || return 1
  [[ "$pid" =~ ^[0-9]+$ ]]
}

# True if pid $1 was started by this shell, which alone can wait for it.
proc_is_child() { [[ " ${proc_children[*]} " == *" $1 "* ]]; }

proc_pid() {
  local pid start
  proc_recorded "$1" || return 1
  echo "$pid"
}

proc_running() {
  local pid start proc_fields
  proc_recorded "$1" && [[ "$start" =~ ^[0-9]+$ ]] || return 1
  proc_stat_fields "$pid" || return 1
  [[ "${proc_fields[0]}" != Z && "${proc_fields[19]}" == "$start" ]]
}

# shellcheck disable=SC2034 # proc_how is read by the caller
proc_exited() {
  local pid start status=0
  if ! proc_recorded "$1"; then
    proc_how="left no pid file ($1)"
    return 0
  fi
  if proc_is_child "$pid"; then
    # This shell's child: `wait` gives its status, which bash keeps after reaping it.
    wait "$pid" 2>/dev/null || status=$?
    if ((status > 128)); then
      proc_how="was killed by SIG$(kill -l $((status - 128)) 2>/dev/null || echo $((status - 128)))"
    else
      proc_how="exited with status $status"
    fi
  else
    proc_how="is gone (pid $pid, started by another shell: its exit status is not known here)"
  fi
}

proc_stop() {
  local pidfile="$1" name="$2" grace="$3" pid start
  proc_running "$pidfile" && proc_recorded "$pidfile" || return 0
  echo "${proc_prefix}stopping $name (pid $pid)" >&2
  kill -TERM "$pid" 2>/dev/null || true
  local deadline=$((SECONDS + grace))
  while proc_running "$pidfile" && ((SECONDS < deadline)); do sleep 0.1; done
  if proc_running "$pidfile"; then
    echo "${proc_prefix}$name (pid $pid) did not exit after ${grace}s; killing it" >&2
    kill -KILL "$pid" 2>/dev/null || true
    while proc_running "$pidfile"; do sleep 0.1; done
  fi
  # Reap a child of this shell here, or bash reports its end later, out of place.
  ! proc_is_child "$pid" || wait "$pid" 2>/dev/null || true
}

proc_log_tail() {
  if [[ -s "$1" ]]; then
    echo "  the last lines of $1:"
    tail -n "${2:-20}" "$1" | sed 's/^/  | /'
  else
    echo "  its log $1 is empty"
  fi
}
