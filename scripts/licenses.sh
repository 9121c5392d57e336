#!/usr/bin/env bash
# Licence inventory of what libcolibri.a / libcolibri.so contain, for teams that ship them in
# firmware: writes docs/THIRD-PARTY-LICENSES.md.
#
#   scripts/licenses.sh            regenerate docs/THIRD-PARTY-LICENSES.md
#   scripts/licenses.sh --check    fail if the committed file is stale
#
# Sources: `cargo metadata` (name, version, licence expression, repository of every crate in the
# `colibri` library's normal-dependency graph for the host target, default features, as
# `cargo build --release` resolves it), `cargo tree --no-default-features` (which of them the
# minimal build keeps), the licence files each crate ships, and `ar t target/release/libcolibri.a`
# (the crates actually present in the archive, including the Rust standard library's).
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=docs/THIRD-PARTY-LICENSES.md
CHECK=0
case "${1:-}" in
--check) CHECK=1 ;;
"") ;;
*) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

TRIPLE=$(rustc -vV | sed -n 's/^host: //p')
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

cargo metadata --format-version 1 --locked --filter-platform "$TRIPLE" >"$TMP/metadata.json"
tree() { # extra cargo-tree flags...
    cargo tree --locked -p colibri -e normal,no-proc-macro --target "$TRIPLE" --prefix none --format '{p}' "$@" |
        sed -e 's/ (\*)$//' -e 's/ (proc-macro)$//' -e 's/ (\/.*)$//' | sort -u
}
tree >"$TMP/full.txt"
tree --no-default-features >"$TMP/minimal.txt"
ARCHIVE=target/release/libcolibri.a
if [ -f "$ARCHIVE" ]; then
    ar t "$ARCHIVE" >"$TMP/archive.txt"
else
    echo "note: $ARCHIVE not built: the archive cross-check and the standard-library list are skipped" >&2
    : >"$TMP/archive.txt"
fi

python3 - "$TMP" "$TRIPLE" >"$TMP/out.md" <<'EOF'
import json, os, re, sys
from collections import Counter

tmp, triple = sys.argv[1], sys.argv[2]
meta = json.load(open(os.path.join(tmp, "metadata.json")))
pkgs = {p["id"]: p for p in meta["packages"]}
nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}
root = next(p["id"] for p in meta["packages"] if p["name"] == "colibri" and p["source"] is None)

def is_proc_macro(p):
    return any("proc-macro" in t["kind"] for t in p["targets"])

def normal_deps(i):
    for d in nodes[i]["deps"]:
        if any(k["kind"] is None for k in d["dep_kinds"]):
            yield d["pkg"]

# Linked: reachable from colibri through normal dependencies without passing a proc-macro.
# Build-time only: proc-macros and whatever only they pull in (runs in the compiler, not linked).
linked, build_only, stack = set(), set(), [root]
while stack:
    i = stack.pop()
    if i in linked:
        continue
    linked.add(i)
    for d in normal_deps(i):
        (build_only.add(d) if is_proc_macro(pkgs[d]) else stack.append(d))
stack = list(build_only)
while stack:
    i = stack.pop()
    for d in normal_deps(i):
        if d not in linked and d not in build_only:
            build_only.add(d)
            stack.append(d)
linked.discard(root)

def key(i):
    return (pkgs[i]["name"], pkgs[i]["version"])

def read_set(name):
    out = set()
    for line in open(os.path.join(tmp, name)):
        m = re.match(r"^(\S+) v(\S+)", line.strip())
        if m and m.group(1) != "colibri":
            out.add((m.group(1), m.group(2)))
    return out

full, minimal = read_set("full.txt"), read_set("minimal.txt")
problems = []
if full != {key(i) for i in linked}:
    problems.append("cargo tree -p colibri and cargo metadata disagree on the linked set: "
                    f"only in tree {sorted(full - {key(i) for i in linked})}, "
                    f"only in metadata {sorted({key(i) for i in linked} - full)}")

# Crates present in the archive: Rust objects are named <crate>-<16 hex digits of the crate's hash>.
archive_hashes = {}
for member in open(os.path.join(tmp, "archive.txt")):
    m = re.match(r"^([A-Za-z_][A-Za-z0-9_]*)-([0-9a-f]{16})\.", member.strip())
    if m:
        archive_hashes.setdefault(m.group(1), set()).add(m.group(2))
archive = set(archive_hashes)
compiler_rt_objects = sum(1 for m in open(os.path.join(tmp, "archive.txt")) if re.match(r"^[0-9a-f]{16}-", m))
if archive:
    missing = sorted(pkgs[i]["name"] for i in linked if pkgs[i]["name"].replace("-", "_") not in archive)
    # A crate whose code is all generic or inlined leaves no object of its own.
    if missing:
        problems.append("in the dependency graph but without an object of their own in libcolibri.a "
                        f"(generic/inline-only code, compiled into their users): {', '.join(missing)}")

def spdx(expr):
    expr = (expr or "").strip()
    if "/" in expr:  # the old crates.io "MIT/Apache-2.0" spelling
        expr = " OR ".join(part.strip() for part in expr.split("/"))
    return re.sub(r"\s+", " ", expr)

LICENSE_FILE = re.compile(r"^(LICEN[CS]E|COPYING|NOTICE|UNLICENSE|COPYRIGHT)", re.I)
def license_files(p):
    d = os.path.dirname(p["manifest_path"])
    try:
        return sorted(f for f in os.listdir(d) if LICENSE_FILE.match(f))
    except OSError:
        return []

def repo(p):
    r = p.get("repository") or p.get("homepage") or ""
    return r.rstrip("/").removesuffix(".git")

ordered = sorted(linked, key=key)
counts = Counter(spdx(pkgs[i]["license"]) for i in ordered)
w = sys.stdout.write

w("# Third-party licences of libcolibri\n\n")
w("<!-- Generated by scripts/licenses.sh from cargo metadata, cargo tree and `ar t libcolibri.a`. Do not edit;\n")
w("     regenerate after changing dependencies (scripts/licenses.sh --check fails when this file is stale). -->\n\n")
w("colibri itself is MIT OR Apache-2.0. `libcolibri.a` and `libcolibri.so` also contain, compiled in, the\n")
w(f"Rust crates below (target `{triple}`, default features, normal dependencies as `cargo build --release`\n")
w("resolves them; development and build-script dependencies are not in the library) and the Rust standard\n")
PERMISSIVE = {"MIT", "Apache-2.0", "BSD-2-Clause", "BSD-3-Clause", "BSL-1.0", "Zlib", "Unlicense", "ISC",
              "Unicode-3.0", "Unicode-DFS-2016", "LLVM-exception", "CC0-1.0", "0BSD"}
ids = {t for i in ordered for t in re.findall(r"[A-Za-z0-9.+-]+", spdx(pkgs[i]["license"]))} - {"OR", "AND", "WITH"}
other = sorted(ids - PERMISSIVE)
with_notice = [pkgs[i]["name"] for i in ordered if any(f.upper().startswith("NOTICE") for f in license_files(pkgs[i]))]
if other:
    w(f"library. **Not on the permissive list, check these: {', '.join(other)}.** ")
else:
    w("library. Every licence here is permissive (MIT, Apache-2.0, BSD, BSL-1.0, Zlib, Unlicense). ")
w("What shipping a binary typically\nrequires (have your legal team confirm): ")
w("keep the copyright and licence notices of the crates you use under MIT or BSD\n")
w("(the licence files each crate ships are listed; BSL-1.0 and Zlib do not require notices for binaries), ")
w("and for\nApache-2.0 also any NOTICE file ")
w(f"({'shipped by: ' + ', '.join(with_notice) if with_notice else 'none of these crates ships one'}). ")
w("Where an expression offers a choice (`OR`), pick one.\n\n")
w("The **minimal** build (`cargo build --release --lib --no-default-features`: no tokenizer, no chat\n")
w(f"templates) contains only the {len([i for i in ordered if key(i) in minimal])} crates marked *yes*.\n\n")

w("## Licence expressions\n\n| licence (SPDX) | crates |\n|---|---|\n")
for lic, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
    w(f"| {lic} | {n} |\n")

w(f"\n## Crates linked into libcolibri ({len(ordered)})\n\n")
w("| crate | version | licence (as declared) | repository | licence files in the crate | minimal build |\n")
w("|---|---|---|---|---|---|\n")
for i in ordered:
    p = pkgs[i]
    files = ", ".join(license_files(p)) or "**none**"
    w(f"| {p['name']} | {p['version']} | {p['license'] or '**none declared**'} | {repo(p)} | {files} | "
      f"{'yes' if key(i) in minimal else ''} |\n")

w("\n## The Rust standard library\n\n")
dep_names = Counter(pkgs[i]["name"].replace("-", "_") for i in linked)
std = sorted(archive - set(dep_names) - {"colibri"})
# The standard library's own copies of crates colibri also depends on (another crate hash).
std_copies = sorted(c for c, n in dep_names.items() if len(archive_hashes.get(c, ())) > n)
if std:
    w("Linked from the Rust toolchain (crates found in `ar t libcolibri.a` that are not dependencies of\n")
    w("colibri): " + ", ".join(f"`{c}`" for c in std))
    if std_copies:
        w(", and the standard library's own copies of " + ", ".join(f"`{c}`" for c in std_copies))
    w(".\n")
else:
    w("(libcolibri.a was not built when this file was generated: the list is missing.)\n")
w("All of them can be used under Apache-2.0 OR MIT (the Rust project's terms; some crates offer more\n")
w("choices; exceptions are listed in the toolchain's `share/doc/rust/COPYRIGHT-library.html`: core's\n")
w("Unicode tables are Unicode-3.0). `compiler_builtins`\n")
w(f"also brings {compiler_rt_objects} C objects compiled from LLVM's compiler-rt (Apache-2.0 WITH LLVM-exception, which\n")
w("waives the attribution requirement for compiled forms).\n")

build_sorted = sorted(build_only, key=key)
w(f"\n## Build-time only ({len(build_sorted)}): procedural macros and their dependencies\n\n")
w("They run inside the compiler while colibri is built and are not part of the library.\n\n")
w("| crate | version | licence (as declared) |\n|---|---|---|\n")
for i in build_sorted:
    p = pkgs[i]
    w(f"| {p['name']} | {p['version']} | {p['license'] or '**none declared**'} |\n")

if problems:
    w("\n## Notes from the cross-checks\n\n")
    for pr in problems:
        w(f"- {pr}\n")
    for pr in problems:
        print("note: " + pr, file=sys.stderr)
EOF

if [ $CHECK = 1 ]; then
    if ! cmp -s "$TMP/out.md" "$OUT"; then
        diff -u "$OUT" "$TMP/out.md" | head -n 40 >&2 || true
        echo "$OUT is stale: run scripts/licenses.sh" >&2
        exit 1
    fi
    echo "$OUT is up to date"
else
    cp "$TMP/out.md" "$OUT"
    echo "wrote $OUT"
fi
