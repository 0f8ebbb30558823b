# Sourced by the scripts that start components: hack/local-up.sh's start() and running(), as
# they are, behind one interface (hack/test-proc-start.sh tests it; the next commit fixes it).
#
#   proc_start PIDFILE LOG PROGRAM [ARG...]   starts PROGRAM in a session of its own
#   proc_running PIDFILE   true while the process PIDFILE records runs the program named
#                          PIDFILE's name (kube-apiserver for pids/kube-apiserver.pid)
#   proc_pid PIDFILE       prints the pid PIDFILE records
#   proc_stop PIDFILE NAME GRACE   TERM
proc_start() {
  local pidfile="$1" log="$2"
  shift 2
  rm -f "$pidfile"
  # shellcheck disable=SC2016 # expanded by the inner shell
  setsid bash -c 'echo $$ >"$0"; [[ -z "${NAD_PROC_EXEC_DELAY:-}" ]] || sleep "$NAD_PROC_EXEC_DELAY"; exec "$@"' "$pidfile" "$@" \
    </dev/null >>"$log" 2>&1 9>&- &
  proc_last=$!
  local _
  for _ in $(seq 50); do [[ -s "$pidfile" ]] && break; sleep 0.1; done
}
proc_pid() { cat "$1"; }
proc_running() {
  local name pid argv0
  name="${1##*/}"
  name="${name%.pid}"
  name="${name%-[0-9]*}"
  [[ -f "$1" ]] || return 1
  pid="$(<"$1")"
  [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null || return 1
  argv0="$(tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | head -n1)" || return 1
  [[ "${argv0##*/}" == "$name" ]]
}
proc_stop() { local pid; pid="$(<"$1")"; kill -TERM "$pid" 2>/dev/null || true; }
