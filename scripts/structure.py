#!/usr/bin/env python3
"""The structure rules CI holds the code to (docs/src/explanation/how-it-works.md):

- no import cycle between source files: `use crate::a::b` and `super::b` edges between leaf files
  (mod.rs, lib.rs and main.rs name their children and are left out), counted here;
- no Rust file under src/, tests/ or python/src/ over 600 lines;
- no mutable process-wide state in the library: no `static` under src/ that holds a
  lock, an atomic, a once-cell, a cell, and no `static mut` or `thread_local!` (run state
  lives in a `Session`).

- the command line is built on the public API: nothing under src/cli/ or in
  src/main.rs names `sketchfit::pipeline` (the drivers it runs are `sketchfit::api::commands`).

(No function takes more than six parameters: clippy.toml, checked by clippy.)
Exit 1 with what broke a rule, 0 otherwise."""

import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX_LINES = 600


def rust_files(top):
    for dirpath, _, names in os.walk(os.path.join(ROOT, top)):
        for n in sorted(names):
            if n.endswith(".rs"):
                yield os.path.join(dirpath, n)


def leaf_edges(src):
    """`file → file` edges of `crate::` and `super::` paths between leaf files of the crate at `src`."""
    files = {os.path.relpath(p, src): open(p, encoding="utf-8").read() for p in rust_files(os.path.relpath(src, ROOT))}

    def target(parts):
        for n in range(len(parts), 0, -1):
            for cand in (os.path.join(*parts[:n]) + ".rs", os.path.join(*parts[:n], "mod.rs")):
                if cand in files:
                    return cand
        return None

    edges = {}
    for rel, text in files.items():
        if os.path.basename(rel) in ("mod.rs", "lib.rs", "main.rs"):
            continue
        out = set()
        paths = [m.group(1).split("::") for m in re.finditer(r"crate::((?:[a-z_][a-z0-9_]*::)*[a-z_][a-z0-9_]*)", text)]
        # `super::x` in the leaf file `a/b.rs` is `crate::a::x`: each `super` climbs one
        # module from the file's own folder.
        here = [p for p in os.path.dirname(rel).split(os.sep) if p]
        for m in re.finditer(r"\b((?:super::)+)((?:[a-z_][a-z0-9_]*::)*[a-z_][a-z0-9_]*)", text):
            up = m.group(1).count("super::") - 1
            if up <= len(here):
                paths.append(here[: len(here) - up] + m.group(2).split("::"))
        for parts in paths:
            t = target(parts)
            if t and t != rel and os.path.basename(t) not in ("mod.rs", "lib.rs", "main.rs"):
                out.add(t)
        edges[rel] = out
    return edges


def cycles(edges):
    """Each strongly connected group of more than one file (Tarjan)."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def main():
    failed = False
    groups = cycles(leaf_edges(os.path.join(ROOT, "src")))
    for g in groups:
        print("cycle among: " + ", ".join(g))
    print(f"{len(groups)} import cycle group(s) between source files")
    failed |= bool(groups)
    long = []
    for top in ("src", "tests", os.path.join("python", "src")):
        for p in rust_files(top):
            n = sum(1 for _ in open(p, encoding="utf-8"))
            if n > MAX_LINES:
                long.append((os.path.relpath(p, ROOT), n))
    for p, n in long:
        print(f"{p}: {n} lines, over {MAX_LINES}")
    print(f"files over {MAX_LINES} lines: {len(long)}")
    failed |= bool(long)
    statics = mutable_statics("src")
    for where in statics:
        print("mutable static: " + where)
    print(f"mutable statics in src/: {len(statics)}")
    failed |= bool(statics)
    side = side_doors()
    for where in side:
        print("the command line reaches past the API: " + where)
    print(f"imports of sketchfit::pipeline in the command line: {len(side)}")
    failed |= bool(side)
    return 1 if failed else 0


def side_doors():
    """`file:line` of each use of `sketchfit::pipeline` in the binary's sources."""
    found = []
    paths = list(rust_files(os.path.join("src", "cli"))) + [os.path.join(ROOT, "src", "main.rs")]
    for p in paths:
        for i, line in enumerate(open(p, encoding="utf-8"), 1):
            if "sketchfit::pipeline" in line.split("//")[0]:
                found.append(f"{os.path.relpath(p, ROOT)}:{i}")
    return found


MUTABLE = re.compile(r"\bstatic\s+mut\b|\bthread_local!|\bstatic\s+[A-Z_][A-Z0-9_]*\s*:\s*[^=;]*"
                     r"(Mutex|RwLock|Atomic|OnceLock|OnceCell|LazyLock|Lazy|Cell|RefCell|UnsafeCell)")


def mutable_statics(top):
    """`file:line: text` of each static under `top` whose value can change at run time."""
    found = []
    for p in rust_files(top):
        for i, line in enumerate(open(p, encoding="utf-8"), 1):
            code = line.split("//")[0]
            if MUTABLE.search(code):
                found.append(f"{os.path.relpath(p, ROOT)}:{i}: {line.strip()}")
    return found


if __name__ == "__main__":
    sys.exit(main())
