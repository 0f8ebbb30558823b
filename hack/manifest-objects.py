#!/usr/bin/env python3
"""Kubernetes manifests as objects, for hack/helm.sh.

  manifest-objects.py diff EXPECTED ACTUAL   the objects of two multi-document YAML files ("-":
                                             stdin), keyed by apiVersion, kind, namespace and
                                             name, compared as parsed data; every missing,
                                             extra or different object is printed (a different
                                             one with a unified diff) and fails
  manifest-objects.py pods [--privileged]    the Pods of the Deployments and DaemonSets on
                                             stdin (their templates, named after them), for a
                                             dry run that Pod Security admission enforces (a
                                             Deployment's is only a warning), as the namespace's default
                                             ServiceAccount (the dry run creates none);
                                             --privileged makes them violate the restricted
                                             profile, to prove it is enforced
"""
import difflib
import sys

import yaml


def load(path: str) -> list[dict]:
    text = sys.stdin.read() if path == "-" else open(path, encoding="utf-8").read()
    return [doc for doc in yaml.safe_load_all(text) if doc is not None]


def key(obj: dict) -> tuple[str, str, str, str]:
    meta = obj.get("metadata") or {}
    return (obj.get("apiVersion", ""), obj.get("kind", ""), meta.get("namespace", ""), meta.get("name", ""))


def show(k: tuple[str, str, str, str]) -> str:
    api, kind, namespace, name = k
    return f"{api} {kind} {namespace + '/' if namespace else ''}{name}"


def dump(obj: dict) -> list[str]:
    return yaml.safe_dump(obj, sort_keys=True, default_flow_style=False).splitlines(keepends=True)


def index(path: str) -> dict:
    objects = {}
    for obj in load(path):
        k = key(obj)
        if k in objects:
            raise SystemExit(f"{path}: {show(k)} twice")
        objects[k] = obj
    return objects


def diff(expected_path: str, actual_path: str) -> int:
    expected, actual = index(expected_path), index(actual_path)
    problems = 0
    for k in sorted(expected.keys() - actual.keys()):
        print(f"missing: {show(k)} (in {expected_path}, not in {actual_path}):", file=sys.stderr)
        sys.stderr.writelines(dump(expected[k]))
        problems += 1
    for k in sorted(actual.keys() - expected.keys()):
        print(f"extra: {show(k)} (in {actual_path}, not in {expected_path}):", file=sys.stderr)
        sys.stderr.writelines(dump(actual[k]))
        problems += 1
    for k in sorted(expected.keys() & actual.keys()):
        if expected[k] != actual[k]:
            print(f"different: {show(k)}:", file=sys.stderr)
            sys.stderr.writelines(difflib.unified_diff(dump(expected[k]), dump(actual[k]), expected_path, actual_path))
            problems += 1
    if problems:
        print(f"{problems} of {len(expected.keys() | actual.keys())} objects differ", file=sys.stderr)
        return 1
    print(f"{len(expected)} objects, all equal", file=sys.stderr)
    return 0


def pods(privileged: bool) -> int:
    out = []
    for obj in load("-"):
        if obj.get("kind") not in ("Deployment", "DaemonSet"):
            continue
        template = obj["spec"]["template"]
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {**template.get("metadata", {}), "name": obj["metadata"]["name"],
                         "namespace": obj["metadata"]["namespace"]},
            "spec": {k: v for k, v in template["spec"].items() if k != "serviceAccountName"},
        }
        if privileged:
            for container in pod["spec"]["containers"]:
                container["securityContext"] = {"privileged": True, "allowPrivilegeEscalation": True}
        out.append(pod)
    if not out:
        raise SystemExit("pods: no Deployment or DaemonSet on stdin")
    yaml.safe_dump_all(out, sys.stdout, sort_keys=False)
    return 0


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[0] == "diff":
        return diff(argv[1], argv[2])
    if argv[:1] == ["pods"] and argv[1:] in ([], ["--privileged"]):
        return pods(argv[1:] == ["--privileged"])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
