#!/usr/bin/env python3
"""The code's shape, checked by machine (run by scripts/test-all.sh):

  1. no file-level import cycle among the Rust files of each crate (src/, cli/src/, convert/src/):
     an edge A -> B when A names `crate::b…` or `super::…` resolving into file B (a mod.rs/lib.rs
     naming its own sub-modules is their declaration, not an edge);
  2. no non-test source file over 600 lines (Rust outside tests/ and benches/, and the Python
     binding's package files);
  3. no non-test Rust function over 80 lines, unless the line before it says why in a comment
     starting `// long:`.

Usage: scripts/check-shape.py [--list]   (--list prints the largest files and functions too)
Exit status 1 with one line per violation.
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CRATES = ["src", "cli/src", "convert/src"]
PYTHON = ["python/colibri"]
MAX_FILE = 600
MAX_FN = 80


def rust_files(src):
    """{module path tuple: file} of a crate's source tree, test modules left out."""
    files = {}
    for root, _, names in os.walk(os.path.join(ROOT, src)):
        for f in names:
            if not f.endswith(".rs") or f == "tests.rs":
                continue
            rel = os.path.relpath(os.path.join(root, f), os.path.join(ROOT, src))[:-3].split(os.sep)
            if "tests" in rel[:-1]:
                continue
            if rel[-1] in ("mod", "lib", "main"):
                rel = rel[:-1]
            files[tuple(rel)] = os.path.join(root, f)
    return files


def strip(text):
    """Code without comments, strings' contents and the trailing in-file test module."""
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r'"(?:\\.|[^"\\])*"', '""', text)
    return re.split(r"#\[cfg\(test\)\]\s*mod\s+tests\b", text)[0]


def edges(files):
    """Import edges between the files of one crate."""
    def resolve(path):
        for k in range(len(path), -1, -1):
            if tuple(path[:k]) in files:
                return tuple(path[:k])
        return None

    out = {m: set() for m in files}
    for mod, path in files.items():
        text = strip(open(path, encoding="utf-8").read())
        own_dir = os.path.basename(path) in ("mod.rs", "lib.rs", "main.rs")

        def expand(m):
            head, body = m.group(1), m.group(2)
            parts = [p.strip().split(" as ")[0] for p in body.split(",") if p.strip() and "{" not in p]
            return " ".join(head + "::" + p for p in parts)

        text = re.sub(r"\b((?:crate|super)(?:::\w+)*)::\{([^{}]*)\}", expand, text)
        for m in re.finditer(r"\b(crate|super)((?:::\w+)+)", text):
            segs = m.group(2).split("::")[1:]
            if m.group(1) == "crate":
                target = segs
            else:
                # `super` is the parent module (of a file or a directory module alike); each
                # further `super` goes one up.
                base, rest = list(mod[:-1]), list(segs)
                while rest and rest[0] == "super":
                    base, rest = base[:-1], rest[1:]
                target = base + rest
            t = resolve(target)
            if t is None or t == mod:
                continue
            if own_dir and t[: len(mod)] == mod:
                continue  # a directory module naming its own children
            out[mod].add(t)
    return out


def cycles(graph):
    """Strongly connected components with more than one file (Tarjan)."""
    index, low, stack, on, found = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted("/".join(c) or "lib" for c in comp))

    sys.setrecursionlimit(10000)
    for v in graph:
        if v not in index:
            visit(v)
    return found


def long_functions(path):
    """(name, line, length) of every non-test fn over MAX_FN lines without a `// long:` reason."""
    lines = open(path, encoding="utf-8").read().split("\n")
    text = "\n".join(lines)
    cut = re.search(r"#\[cfg\(test\)\]\s*mod\s+tests\b", text)
    last = text[: cut.start()].count("\n") if cut else len(lines)
    found = []
    i = 0
    while i < last:
        m = re.match(r"\s*(?:pub(?:\([^)]*\))?\s+)?(?:const\s+)?(?:unsafe\s+)?(?:extern\s+\"C\"\s+)?fn\s+(\w+)", lines[i])
        if not m:
            i += 1
            continue
        depth, j, opened = 0, i, False
        while j < len(lines):
            code = re.sub(r"//.*", "", lines[j])
            code = re.sub(r"'(?:\\.|[^'\\])'", "", re.sub(r'"(?:\\.|[^"\\])*"', "", code))
            depth += code.count("{") - code.count("}")
            opened = opened or "{" in code
            if opened and depth <= 0 or (not opened and code.rstrip().endswith(";")):
                break
            j += 1
        length = j - i + 1
        reason = i > 0 and lines[i - 1].strip().startswith("// long:")
        k = i - 1
        while not reason and k >= 0 and lines[k].strip().startswith(("#[", "///")):
            reason = lines[k].strip().startswith("// long:")
            k -= 1
        if length > MAX_FN and not reason:
            found.append((m.group(1), i + 1, length))
        i = j + 1 if opened else i + 1
    return found


def main():
    problems, sizes, fns = [], [], []
    for crate in CRATES:
        files = rust_files(crate)
        for comp in cycles(edges(files)):
            problems.append(f"import cycle in {crate}: {', '.join(comp)}")
        for path in files.values():
            n = open(path, encoding="utf-8").read().count("\n")
            rel = os.path.relpath(path, ROOT)
            sizes.append((n, rel))
            for name, line, length in long_functions(path):
                fns.append((length, f"{rel}:{line} {name}"))
                problems.append(f"{rel}:{line}: fn {name} is {length} lines (> {MAX_FN}; say why in a `// long:` comment)")
    for pkg in PYTHON:
        for root, _, names in os.walk(os.path.join(ROOT, pkg)):
            for f in names:
                if f.endswith(".py"):
                    path = os.path.join(root, f)
                    sizes.append((open(path, encoding="utf-8").read().count("\n"), os.path.relpath(path, ROOT)))
    for n, rel in sizes:
        if n > MAX_FILE:
            problems.append(f"{rel}: {n} lines (> {MAX_FILE}: split it by job)")
    if "--list" in sys.argv:
        for n, rel in sorted(sizes, reverse=True)[:10]:
            print(f"{n:6} {rel}")
    for p in problems:
        print(p)
    print(f"check-shape: {len(sizes)} files, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
