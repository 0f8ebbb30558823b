#!/usr/bin/env bash
# Tests of the scripts every command starts with (hack/test.sh runs them, as root):
# - hack/system-packages.sh, as an unprivileged user on a machine without one of the packages,
#   names the package, what needs it and the apt-get line, and exits 1 without installing;
# - hack/nodes.sh preflight names root to a user and says nothing to root;
# - hack/steps.sh prints each step's time and the table, and appends the rows to its TSV;
# - hack/proc.sh starts a component without the start race, and tells how one ended;
# - the checkers around the tests (check-layers, check-clean, the monitoring lint) each fail on a
#   broken copy of what they check (hack/test-checkers.sh).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

[[ "$(id -u)" == 0 ]] || { echo "test-scripts: run as root (it runs the scripts as another user too)" >&2; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
chmod 755 "$work"
failed=0
fail() { echo "test-scripts: FAIL: $*" >&2; failed=1; }
pass() { echo "test-scripts: ok: $*" >&2; }
as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }

# A copy of the repository's scripts that nobody can read, and a PATH without shellcheck.
mkdir -p "$work/repo/hack" "$work/path"
cp hack/system-packages.sh hack/nodes.sh hack/pki.sh hack/proc.sh hack/steps.sh "$work/repo/hack/"
chmod -R a+rX "$work/repo"
IFS=: read -ra dirs <<<"$PATH"
for dir in "${dirs[@]}"; do
  for program in "$dir"/*; do
    name="${program##*/}"
    [[ "$name" == shellcheck || -e "$work/path/$name" || ! -x "$program" ]] || ln -s "$program" "$work/path/$name"
  done
done

# system-packages: not root, shellcheck missing.
status=0
out="$(cd "$work/repo" && as_nobody env -i PATH="$work/path" HOME="$work/home" bash hack/system-packages.sh lint </dev/null 2>&1)" || status=$?
if [[ "$status" == 1 && "$out" == *"shellcheck: actionlint's check"* && "$out" == *"apt-get install -y "*shellcheck* ]]; then
  pass "system-packages names a missing package and the apt-get line to a user, and exits 1"
else
  fail "system-packages as a user without shellcheck: exit $status, said: $out"
fi
# ... and lists what each command needs.
listed="$(hack/system-packages.sh --list ci)"
for package in nftables iproute2 musl-tools umoci runc clang-19 wasi-libc shellcheck; do
  grep -qx "debian $package" <<<"$listed" || fail "system-packages --list ci does not list $package"
done
grep -qx "debian nftables" <<<"$(hack/system-packages.sh --list lint)" \
  && fail "system-packages --list lint lists nftables, which only the data plane needs"
pass "system-packages --list"

# nodes.sh preflight.
status=0
out="$(cd "$work/repo" && as_nobody bash hack/nodes.sh preflight 2>&1)" || status=$?
if [[ "$status" == 1 && "$out" == "missing: root: "* ]]; then
  pass "preflight says not root to a user"
else
  fail "preflight as a user: exit $status, said: $out"
fi
status=0
out="$(hack/nodes.sh preflight 2>&1)" || status=$?
if [[ "$status" == 0 && -z "$out" ]]; then
  pass "preflight says nothing to root"
else
  fail "preflight as root: exit $status, said: $out"
fi

# steps.sh.
out="$(XDG_CACHE_HOME="$work/cache" bash -c 'source hack/steps.sh; steps_init selftest; step one "the first step"; sleep 1; step two; steps_report' 2>&1)"
rows="$(cut -f3,4 "$work/cache/nad-service-controller/timings/selftest.tsv" 2>/dev/null || true)"
if [[ "$out" == *"== the first step"* && "$out" == *"-- one: 1 s"* && "$out" == *"-- two: 0 s"* \
  && "$out" == *"selftest: wall time per step"* && "$rows" == $'one\t1\ntwo\t0' ]]; then
  pass "steps prints each step's time and the table, and keeps the rows"
else
  fail "steps said: $out; kept: $rows"
fi

# steps.sh's step_repeatable: a step that fails once is tried again; one that fails twice is
# named with the command that repeats it alone.
out="$(bash -c 'source hack/steps.sh; steps_init selftest
  flaky() { [[ -e "$1" ]] || { touch "$1"; return 1; }; echo up; }
  step_repeatable "starting the flaky part" "make flaky-up" flaky "$0"' "$work/flaky" 2>&1)" && status=0 || status=$?
if [[ "$status" == 0 && "$out" == *"starting the flaky part failed (above); trying it once more"*up ]]; then
  pass "step_repeatable tries a failed step once more"
else
  fail "step_repeatable, a step failing once: exit $status, said: $out"
fi
out="$(bash -c 'source hack/steps.sh; steps_init selftest; step_repeatable "starting the broken part" "make broken-up" false' 2>&1)" && status=0 || status=$?
if [[ "$status" == 1 && "$out" == *"starting the broken part failed twice"*"run 'make broken-up' to repeat this step alone, then 'make selftest' again, which rebuilds nothing"* ]]; then
  pass "step_repeatable names the command that repeats a step failing twice"
else
  fail "step_repeatable, a step failing twice: exit $status, said: $out"
fi

# The start race of issue 41 (hack/test-proc-start.sh): hundreds of starts through hack/proc.sh,
# each checked inside a widened window between the fork and the exec; exits and kills told.
if hack/test-proc-start.sh; then
  pass "hack/proc.sh: starts without the race, exits told with their status"
else
  fail "hack/proc.sh: hack/test-proc-start.sh (above)"
fi

# The checkers, each shown failing on a broken copy (hack/test-checkers.sh).
if hack/test-checkers.sh; then
  pass "check-layers, check-clean and the monitoring lint each fail on a broken copy"
else
  fail "the checkers: hack/test-checkers.sh (above)"
fi

exit "$failed"
