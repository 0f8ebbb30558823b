#!/usr/bin/env python3
"""House rules for .github/workflows that actionlint does not check.

- every action is pinned by a full commit SHA, with the release it is in a comment;
- the workflow's default token is read-only (`permissions: contents: read`); jobs widen it;
- every job has a timeout;
- the jobs the project relies on exist (CI, the KinD quick start, the release);
- ci.yaml runs every make target .ci/run runs (a target whose Makefile rule has no recipe, as
  lint, counts as run when each of its prerequisites is), so that GitHub's CI cannot drop one
  that the project's CI runs.
"""
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
EXPECTED_JOBS = {
    "ci.yaml": {"lint", "deny", "test", "build"},
    "e2e-kind.yaml": {"quick-start"},
    "release.yaml": {"image", "publish", "release"},
}
USES = re.compile(r"^\s*(?:-\s+)?uses:\s*(\S+)(.*)$")
PINNED = re.compile(r"^[\w.-]+/[\w./-]+@[0-9a-f]{40}$")
VERSION_COMMENT = re.compile(r"#\s*v\d+(\.\d+)*")
# .ci/run's commands: make at the start of a line, after VAR=value assignments.
CI_RUN_MAKE = re.compile(r"^\s*(?:[A-Za-z_]\w*=\S*\s+)*make\s+(?:-\S+\s+)*([\w.-]+)")
# A workflow's: make anywhere in a command line (after sudo, env, VAR=value, ;, &&), with its
# options and variables before the target.
STEP_MAKE = re.compile(r"(?:^|[\s;&|(])make\s+(?:-\S+\s+|[A-Za-z_]\w*=\S*\s+)*([\w.-]+)")
MAKE_RULE = re.compile(r"^([\w.-]+):(?!=)([^#]*)")


def make_rules() -> dict[str, tuple[list[str], bool]]:
    """Each target of the Makefile: its prerequisites, and whether it has a recipe."""
    lines = (ROOT / "Makefile").read_text().splitlines()
    rules = {}
    for number, line in enumerate(lines):
        match = MAKE_RULE.match(line)
        if match and not match.group(1).startswith("."):
            recipe = number + 1 < len(lines) and lines[number + 1].startswith("\t")
            rules[match.group(1)] = (match.group(2).split(), recipe)
    return rules


def ci_run_targets(workflow: dict) -> list[str]:
    """A problem for each make target of .ci/run that the workflow does not run."""
    targets = [
        match.group(1)
        for line in (ROOT / ".ci" / "run").read_text().splitlines()
        if (match := CI_RUN_MAKE.match(line))
    ]
    if not targets:
        return ["found no `make <target>` line in .ci/run: fix CI_RUN_MAKE in hack/check-workflows.py"]
    run = set()
    for job in (workflow.get("jobs") or {}).values():
        for step in job.get("steps") or []:
            for line in str(step.get("run", "")).splitlines():
                if not line.lstrip().startswith("#"):
                    run.update(match.group(1) for match in STEP_MAKE.finditer(line))
    rules = make_rules()

    def covered(target: str) -> bool:
        if target in run:
            return True
        prerequisites, recipe = rules.get(target, ([], True))
        return not recipe and bool(prerequisites) and all(covered(p) for p in prerequisites)

    problems = []
    for target in dict.fromkeys(targets):
        if covered(target):
            continue
        prerequisites, recipe = rules.get(target, ([], True))
        parts = "" if recipe else f" (nor {', '.join(p for p in prerequisites if not covered(p))} of its parts)"
        problems.append(
            f".ci/run runs `make {target}`, which no step runs here{parts}: add a step, as the test job runs make test"
        )
    return problems


def check(path: Path) -> list[str]:
    problems = []
    text = path.read_text()
    for number, line in enumerate(text.splitlines(), 1):
        match = USES.match(line)
        if not match:
            continue
        action, rest = match.groups()
        if action.startswith("./"):
            continue
        if not PINNED.match(action):
            problems.append(f"line {number}: {action} is not pinned by a 40-hex commit SHA")
        elif not VERSION_COMMENT.search(rest):
            problems.append(f"line {number}: {action} has no '# vX.Y.Z' comment naming its release")
    workflow = yaml.safe_load(text)
    if workflow.get("permissions") != {"contents": "read"}:
        problems.append("top-level permissions must be exactly {contents: read}")
    jobs = workflow.get("jobs") or {}
    for name, job in jobs.items():
        if "timeout-minutes" not in job:
            problems.append(f"job {name}: no timeout-minutes")
    missing = EXPECTED_JOBS.get(path.name, set()) - set(jobs)
    if missing:
        problems.append(f"missing jobs: {', '.join(sorted(missing))}")
    if path.name == "ci.yaml":
        problems.extend(ci_run_targets(workflow))
    return problems


def main() -> int:
    workflows = sorted((ROOT / ".github" / "workflows").glob("*.y*ml"))
    found = {w.name for w in workflows}
    failed = False
    for name in sorted(set(EXPECTED_JOBS) - found):
        print(f".github/workflows/{name}: missing", file=sys.stderr)
        failed = True
    for path in workflows:
        for problem in check(path):
            print(f"{path.relative_to(ROOT)}: {problem}", file=sys.stderr)
            failed = True
    if not failed:
        print(f"check-workflows: ok: {len(workflows)} workflows", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
