#!/usr/bin/env python3
"""House rules for .github/workflows that actionlint does not check.

- every action is pinned by a full commit SHA, with the release it is in a comment;
- the workflow's default token is read-only (`permissions: contents: read`); jobs widen it;
- every job has a timeout;
- the jobs the project relies on exist (CI, the KinD quick start, the release).
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
