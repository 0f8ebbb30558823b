# Sourced by the scripts of long commands (hack/test.sh, hack/demo.sh, hack/test-faults.sh,
# .ci/run): each step prints its title when it starts and its wall time when it ends, and
# steps_report prints the table of all of them (call it from the script's EXIT trap). The table
# is also appended to ${XDG_CACHE_HOME:-$HOME/.cache}/nad-service-controller/timings/<name>.tsv
# (date, commit, step, seconds), the raw data of hack/README.md's table ("How long things take").
#
#   steps_init NAME           once, before the first step
#   step KEY [DESCRIPTION]    ends the step before (printing its time), starts KEY
#   steps_report              ends the last step, prints the table
#   step_repeatable ...       a short step tried twice, then named for repeating (below)
# shellcheck shell=bash

steps_name=""
steps_key=""
steps_started=0
steps_first=0
steps_rows=()

steps_bold="" steps_dim="" steps_plain=""
if [[ -t 2 ]]; then
  steps_bold=$'\033[1m' steps_dim=$'\033[2m' steps_plain=$'\033[0m'
fi

steps_init() {
  steps_name="$1"
  steps_first=$SECONDS
}

steps_duration() { # seconds -> "4 min 02 s" / "12 s"
  if (($1 >= 60)); then printf '%d min %02d s' $(($1 / 60)) $(($1 % 60)); else printf '%d s' "$1"; fi
}

steps_end() {
  [[ -n "$steps_key" ]] || return 0
  local took=$((SECONDS - steps_started))
  printf '%s-- %s: %s%s\n' "$steps_dim" "$steps_key" "$(steps_duration "$took")" "$steps_plain" >&2
  steps_rows+=("$took|$steps_key")
  steps_key=""
}

step() {
  steps_end
  steps_key="$1"
  steps_started=$SECONDS
  printf '\n%s== %s%s\n' "$steps_bold" "${2:-$1}" "$steps_plain" >&2
}

# A step that runs beside the others: background_start LOG COMMAND... starts it in a process
# group of its own; background_wait KEY DESCRIPTION waits for it as a step of its own, printing
# its "<name>:" lines (or its log's tail if it failed); background_stop, for an EXIT trap, stops it.
background_pid="" background_log=""
background_start() {
  background_log="$1"
  shift
  setsid "$@" >"$background_log" 2>&1 &
  background_pid=$!
}
background_wait() {
  [[ -n "$background_pid" ]] || return 0
  step "$1" "$2"
  local status=0
  wait "$background_pid" || status=$?
  background_pid=""
  if ((status)); then
    tail -n 40 "$background_log" >&2
    echo "$2: failed (above; the whole log: $background_log)" >&2
    return "$status"
  fi
  grep -E '^[a-z-]+: .* took ' "$background_log" | sed 's/^/  /' >&2 || true
}
background_stop() {
  [[ -z "$background_pid" ]] || kill -- "-$background_pid" 2>/dev/null || true
}

# A short step after the long builds (starting the control plane or the data plane), whose
# command stops what it started when it fails: tried once more, and if it fails again, the
# message names the command that repeats it alone; the builds are kept either way.
#   step_repeatable WHAT REPEAT COMMAND...   (COMMAND's stdout is this function's)
step_repeatable() {
  local what="$1" repeat="$2"
  shift 2
  "$@" && return 0
  echo "$steps_name: $what failed (above); trying it once more" >&2
  "$@" && return 0
  echo "$steps_name: $what failed twice (above). The builds before it are done and kept: run \
'$repeat' to repeat this step alone, then 'make $steps_name' again, which rebuilds nothing and \
goes on from here (README: Troubleshooting)" >&2
  return 1
}

steps_report() {
  steps_end
  ((${#steps_rows[@]})) || return 0
  local row total=$((SECONDS - steps_first)) dir commit
  dir="${XDG_CACHE_HOME:-$HOME/.cache}/nad-service-controller/timings"
  commit="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  mkdir -p "$dir" 2>/dev/null || true
  printf '\n%s== %s: wall time per step%s\n' "$steps_bold" "$steps_name" "$steps_plain" >&2
  for row in "${steps_rows[@]}"; do
    printf '  %-44s %12s\n' "${row#*|}" "$(steps_duration "${row%%|*}")" >&2
    printf '%s\t%s\t%s\t%s\n' "$(date -u +%FT%TZ)" "$commit" "${row#*|}" "${row%%|*}" >>"$dir/$steps_name.tsv" 2>/dev/null || true
  done
  printf '  %-44s %12s\n' "total" "$(steps_duration "$total")" >&2
  steps_rows=()
}
