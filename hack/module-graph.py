#!/usr/bin/env python3
"""The module import graph of each workspace crate (host/ and crates/*/), drawn from its Rust
sources, and two things it should not have. `make lint` runs it.

Each source file under src/ is a node (test modules aside: files named tests.rs or under a
tests/ folder, and a `#[cfg(test)] mod tests { ... }` block at the end of a file). An arrow
goes from a file to the file of each module of the same crate it imports from: its `use`
declarations and the `crate::...` and `super::...` paths in its code, resolved as Rust does
(`crate::`, `super::`, `self::`, a child module's name). A name a module only imports itself,
with `use` or `pub use`, is followed to the module that defines it; a name from outside the
crate (std::, nad_core::, ...) draws no arrow. The names imported are noted on each arrow.

- An arrow back up goes from a file to one of its own ancestor modules (lib.rs included), for a
  name defined in that ancestor's file: the submodule leans on its parent. MAX_BACK_UP caps how
  many a crate may have (none: what children share lives in a child of its own).
- A circle is a group of files that import each other, round and round (a strongly connected
  component of more than one file), over the arrows that are not arrows back up: those are
  counted on their own, and a parent that re-exports its children would otherwise join every
  circle below it. Any circle fails the check.

    python3 hack/module-graph.py [--root DIR] [--crate PATH]

Exit status 1 if any crate has a circle or more arrows back up than allowed, 0 otherwise.
"""
import argparse
import os
import re
import sys

# Arrows back up a crate may have.
MAX_BACK_UP = 0

MAIN = "<main>"  # the first segment of the modules of src/main.rs's own tree
TEST_BLOCK = re.compile(r"^[ \t]*#\[cfg\(test\)\]\s*(?:#\[[^\]]*\]\s*)*"
                        r"(?:pub(?:\([^)]*\))?\s+)?mod\s+tests\s*\{", re.M)
NOISE = re.compile(r"""(?P<comment>//[^\n]*|/\*.*?\*/)
    | (?<!\w)b?r(?P<hashes>\#*)".*?"(?P=hashes)
    | b?"(?:\\.|[^"\\])*"
    | b?'(?:\\u\{[0-9a-fA-F]+\}|\\.|[^\\'\n])'""", re.S | re.X)
USE = re.compile(r"(?<![\w$])use\s+([^;]+);")
MOD = re.compile(r"(?<![\w$])mod\s+(\w+)\s*;")
INLINE = re.compile(r"(?<![\w$:])\$?(crate|super)((?:\s*::\s*\w+)+)")


def plural(n, word, words=None):
    return f"{n} {word if n == 1 else (words or word + 's')}"


def clean(text):
    """The text without test blocks, comments and string contents."""
    match = TEST_BLOCK.search(text)
    if match:
        text = text[:match.start()]
    return NOISE.sub(lambda m: "" if m.group("comment") else '""', text)


def split_top(text):
    """Split a use-tree group's inside at its top-level commas."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += {"{": 1, "}": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    return parts + [text[start:]]


def expand(tree, prefix=()):
    """A use tree ("a::{b, c::d as e, self}") as [(path segments, name bound)]."""
    tree = re.sub(r"\s+", " ", tree).strip()
    if not tree:
        return []
    brace = tree.find("{")
    if brace >= 0 and tree.endswith("}"):
        head = prefix + tuple(s.strip() for s in tree[:brace].split("::") if s.strip())
        return [pair for part in split_top(tree[brace + 1:-1]) for pair in expand(part, head)]
    path, _, alias = tree.partition(" as ")
    segs = prefix + tuple(s.strip() for s in path.split("::") if s.strip())
    if segs and segs[-1] == "self":
        segs = segs[:-1]
    return [(segs, alias.strip() or segs[-1])] if segs else []


def module_of(rel):
    """src-relative file path -> module path: a/b.rs -> (a, b), a/mod.rs -> (a,), lib.rs -> ()."""
    parts = rel[:-len(".rs")].split(os.sep)
    if parts[-1] == "mod":
        parts = parts[:-1]
    return () if parts == ["lib"] else (MAIN,) if parts == ["main"] else tuple(parts)


class Crate:
    def __init__(self, root, directory):
        self.dir = directory
        self.name = package_name(os.path.join(root, directory, "Cargo.toml"))
        src = os.path.join(root, directory, "src")
        self.files, self.text = {}, {}  # module path -> file (relative to the root), cleaned text
        for rel in source_files(src):
            with open(os.path.join(src, rel), encoding="utf-8") as f:
                text = clean(f.read())
            key = module_of(rel)
            self.files[key] = os.path.join(directory, "src", rel)
            self.text[key] = text
        main_mods = set(MOD.findall(self.text.get((MAIN,), ""))) - set(MOD.findall(self.text.get((), "")))
        self.files = {self.in_tree(k, main_mods): f for k, f in self.files.items()}
        self.text = {self.in_tree(k, main_mods): t for k, t in self.text.items()}
        self.bound = {key: self.top_level_uses(text) for key, text in self.text.items()}

    @staticmethod
    def in_tree(key, main_mods):
        """Modules that only main.rs declares belong to main's tree."""
        return (MAIN,) + key if key and key[0] in main_mods else key

    @staticmethod
    def top_level_uses(text):
        """Names a module binds with its top-level `use` declarations -> their paths."""
        bound = {}
        for match in USE.finditer(text):
            if text.count("{", 0, match.start()) == text.count("}", 0, match.start()):
                for segs, name in expand(match.group(1)):
                    if name not in ("*", "_"):
                        bound[name] = segs
        return bound

    def resolve(self, here, segs, seen=frozenset()):
        """The (module, name) a path used in module `here` reaches in this crate, or None."""
        first, rest = segs[0], list(segs[1:])
        if first == "crate":
            start = here[:1] if here[:1] == (MAIN,) else ()
        elif first == "self":
            start = here
        elif first == "super":
            start = here[:-1]
            while rest and rest[0] == "super":
                start, rest = start[:-1], rest[1:]
        elif here + (first,) in self.files:
            start, rest = here, list(segs)
        elif first in self.bound.get(here, {}) and (here, first) not in seen:
            return self.resolve(here, self.bound[here][first] + tuple(rest), seen | {(here, first)})
        else:
            return None
        return self.walk(start, rest, seen)

    def walk(self, module, rest, seen):
        """Down the module tree as far as it goes, then through the names the module imports."""
        while rest and module + (rest[0],) in self.files:
            module, rest = module + (rest[0],), rest[1:]
        if not rest or rest[0] == "*":
            return module, rest[0] if rest else (module[-1] if module else "crate")
        name, bound = rest[0], self.bound.get(module, {})
        if name in bound and (module, name) not in seen:
            return self.resolve(module, bound[name] + tuple(rest[1:]), seen | {(module, name)})
        return module, name

    def imports(self, key):
        """The paths a module's file uses: its use declarations, then crate:: and super:: in code."""
        text = self.text[key]
        for match in USE.finditer(text):
            for segs, _ in expand(match.group(1)):
                yield segs
        for match in INLINE.finditer(USE.sub(";", text)):
            yield (match.group(1),) + tuple(s.strip() for s in match.group(2).split("::") if s.strip())

    def edges(self):
        """(from module, to module) -> names imported."""
        edges = {}
        for key in self.files:
            for segs in self.imports(key):
                reached = self.resolve(key, segs)
                if reached and reached[0] in self.files and reached[0] != key:
                    edges.setdefault((key, reached[0]), set()).add(reached[1])
        return edges


def package_name(cargo_toml):
    section = None
    with open(cargo_toml, encoding="utf-8") as f:
        for line in f:
            header = re.match(r"\s*\[([^\]]+)\]", line)
            section = header.group(1).strip() if header else section
            name = re.match(r'\s*name\s*=\s*"([^"]+)"', line)
            if section == "package" and name:
                return name.group(1)
    return "?"


def source_files(src):
    """src-relative paths of the crate's .rs files, test modules and templates left out."""
    for folder, dirs, names in os.walk(src):
        dirs[:] = sorted(d for d in dirs if d not in ("tests", "templates", "target"))
        for name in sorted(names):
            if name.endswith(".rs") and name != "tests.rs":
                yield os.path.relpath(os.path.join(folder, name), src)


def find_crates(root):
    candidates = ["host"] + sorted(os.path.join("crates", d) for d in os.listdir(os.path.join(root, "crates"))
                                   if os.path.isdir(os.path.join(root, "crates", d)))
    for directory in candidates:
        path = os.path.join(root, directory)
        if os.path.isfile(os.path.join(path, "Cargo.toml")) and any(
                os.path.isfile(os.path.join(path, "src", f)) for f in ("lib.rs", "main.rs")):
            yield directory


def circles(nodes, edges):
    """Strongly connected components of more than one node (Tarjan's algorithm, iterative)."""
    after = {n: sorted(b for a, b in edges if a == n) for n in nodes}
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    for start in sorted(nodes):
        if start in index:
            continue
        work = [(start, iter(after[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = set()
                    while not group or member != node:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.add(member)
                    if len(group) > 1:
                        found.append(group)
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(after[child])))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def report(crate):
    """Print the crate's graph; return (circles, arrows back up)."""
    edges = crate.edges()
    up = {(a, b) for a, b in edges if len(b) < len(a) and a[:len(b)] == b}
    onward = {edge: names for edge, names in edges.items() if edge not in up}
    groups = sorted((sorted(crate.files[k] for k in g), g) for g in circles(crate.files, onward))
    back_up = sorted((crate.files[a], crate.files[b], edges[a, b]) for a, b in up)
    print(f"module-graph: {crate.dir} ({crate.name}): {plural(len(crate.files), 'file')}, "
          f"{plural(len(edges), 'arrow')}, {plural(len(groups), 'circle')}, "
          f"{plural(len(back_up), 'arrow back up', 'arrows back up')}")
    for files, group in groups:
        print(f"  circle: {', '.join(files)}")
        for (a, b), names in sorted(edges.items(), key=lambda e: (crate.files[e[0][0]], crate.files[e[0][1]])):
            if a in group and b in group:
                print(f"    {crate.files[a]} -> {crate.files[b]}: {', '.join(sorted(names))}")
    for a, b, names in back_up:
        print(f"  back up: {a} -> {b}: {', '.join(sorted(names))}")
    return len(groups), len(back_up)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        help="the repository root (default: the parent of this script's folder)")
    parser.add_argument("--crate", help="only this crate directory, e.g. host or crates/cli")
    args = parser.parse_args()
    crates = list(find_crates(args.root))
    if args.crate:
        wanted = os.path.normpath(args.crate)
        crates = [c for c in crates if c == wanted]
        if not crates:
            print(f"module-graph: no crate at {args.crate} under {args.root}", file=sys.stderr)
            return 2
    total, failures = 0, []
    for directory in crates:
        found, back_up = report(Crate(args.root, directory))
        total += found
        if back_up > MAX_BACK_UP:
            failures.append(f"{directory}: {plural(back_up, 'arrow back up', 'arrows back up')} of at most {MAX_BACK_UP}")
    if total:
        failures.insert(0, plural(total, "circle"))
    print(f"module-graph: FAIL ({'; '.join(failures)})" if failures else "module-graph: ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
