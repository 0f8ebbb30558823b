#!/usr/bin/env python3
"""One build of the dependencies: the release build's crates are the tests' crates.

`cargo test` resolves features over the dev-dependencies too. When one of them turns on a
feature of a crate the release build also compiles (tokio's `test-util`, say), every crate above
that one is compiled a second time with a different hash: on a cold machine, minutes of the
two cores for nothing. hack/test.sh pipes both builds' JSON messages through this script:

    cargo build ... --message-format=json-render-diagnostics | one-build.py record FILE
    cargo test --no-run ... --message-format=json-render-diagnostics | one-build.py check FILE

`record` keeps the artifacts of every registry crate the release build compiled; `check` fails,
naming the crate and the features that differ, when the test build compiled one of them again
into other files. The workspace's own crates are left out: their test builds are new by nature.
"""

import json
import sys


def artifacts(stream):
    """The registry crates' artifacts in cargo's JSON messages: (package, target) -> (features, files)."""
    found = {}
    for line in stream:
        if not line.startswith("{"):
            continue
        message = json.loads(line)
        if message.get("reason") != "compiler-artifact":
            continue
        package = message["package_id"]
        if not package.startswith("registry+"):
            continue
        target = message["target"]
        # A crate can be built for the host (build scripts, proc macros) and for the target:
        # <target dir>/release/... or <target dir>/<triple>/release/...
        platform = message["filenames"][0].rsplit("/release/", 1)[0].rsplit("/", 1)[-1]
        key = f"{package}|{'/'.join(target['kind'])}|{target['name']}|{platform}"
        found[key] = {"features": sorted(message["features"]), "files": sorted(message["filenames"])}
    return found


def crate(key):
    """registry+https://...#tokio@1.54.1|lib|tokio|<triple> -> tokio@1.54.1 (lib, <triple>)"""
    package, kind, _, platform = key.split("|")
    return f"{package.rsplit('#', 1)[-1]} ({kind}, {platform})"


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("record", "check"):
        print("usage: one-build.py record|check FILE  (cargo's JSON messages on stdin)", file=sys.stderr)
        return 2
    mode, path = sys.argv[1:]
    seen = artifacts(sys.stdin)
    if mode == "record":
        with open(path, "w", encoding="utf-8") as out:
            json.dump(seen, out)
        return 0
    with open(path, encoding="utf-8") as recorded_file:
        recorded = json.load(recorded_file)
    again = sorted(key for key, built in seen.items() if key in recorded and recorded[key]["files"] != built["files"])
    causes = [key for key in again if seen[key]["features"] != recorded[key]["features"]]
    for key in causes:
        print(
            f"one-build: cargo test compiled {crate(key)} again, with features {seen[key]['features']} "
            f"where the release build has {recorded[key]['features']}: a dev-dependency turns on a "
            "feature the build lacks; turn it on for the build too (hack/README.md, "
            '"One build of the dependencies")',
            file=sys.stderr,
        )
    if again:
        others = ", ".join(crate(key) for key in again if key not in causes)
        print(
            f"one-build: {len(again)} crates of the release build compiled twice"
            + (f"; with the same features, above those: {others}" if others else ""),
            file=sys.stderr,
        )
        return 1
    print(f"one-build: the tests reused all {len(recorded)} dependency builds of the release build", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
