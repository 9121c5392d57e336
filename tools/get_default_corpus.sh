#!/usr/bin/env bash
# Reproduce the plain-text corpus used to train colibri's default model.
#
# Source: Debian bookworm packages `bible-kjv-text` (the compressed King James
# Version text, /usr/lib/bible.data) and `bible-kjv` (the `bible` program that
# prints it). The KJV text is out of copyright; see docs/default-model.md.
#
# Nothing is installed system-wide: both .deb files are fetched with
# `apt-get download` and unpacked with `dpkg -x` into a work directory.
# Needs: apt-get with Debian package lists (run `apt-get update` once), dpkg,
# and libreadline8 (a dependency of the `bible` binary; present on most Debian
# systems, otherwise `apt-get install libreadline8`).
#
# Usage: tools/get_default_corpus.sh [OUT_TXT] [WORK_DIR]
#   defaults: OUT_TXT=/work/artifacts/corpus/kjv.txt
#             WORK_DIR=<dir of OUT_TXT>/debs
#
# Output format: one verse per line, verse references ("Ge1:1") removed,
# chapters separated by one blank line. 31,102 verses, 1,189 chapters, ~4.3 MB.
set -euo pipefail

OUT="${1:-/work/artifacts/corpus/kjv.txt}"
OUT_DIR="$(cd "$(dirname "$OUT")" 2>/dev/null && pwd || { mkdir -p "$(dirname "$OUT")"; cd "$(dirname "$OUT")" && pwd; })"
OUT="$OUT_DIR/$(basename "$OUT")"
WORK="${2:-$OUT_DIR/debs}"
KJV_VERSION="${KJV_VERSION:-4.38}"   # version in Debian bookworm
# sha256 of the output produced from bible-kjv(-text) 4.38
EXPECTED_SHA256="${EXPECTED_SHA256:-6b40e3f13a6cf83937165995b4868d7eb1f429d0c96ddb8574bea5544101a914}"

mkdir -p "$WORK"
cd "$WORK"
if ! ls bible-kjv-text_"${KJV_VERSION}"_all.deb bible-kjv_"${KJV_VERSION}"_*.deb >/dev/null 2>&1; then
    apt-get download "bible-kjv-text=${KJV_VERSION}" "bible-kjv=${KJV_VERSION}"
fi
rm -rf root && mkdir root
for deb in bible-kjv-text_"${KJV_VERSION}"_all.deb bible-kjv_"${KJV_VERSION}"_*.deb; do
    dpkg -x "$deb" root
done
cp root/usr/share/doc/bible-kjv-text/copyright "$OUT_DIR/bible-kjv-text.copyright"

# Dump Genesis 1:1 .. Revelation 22:21 with pretty-printing off (-f):
# one verse per line, each prefixed with its reference, e.g. "Ge1:1 In the ...".
./root/usr/bin/bible -p "$WORK/root/usr/lib" -f 'Gen1:1-Rev22:21' </dev/null > raw.txt

# Strip the reference, insert a blank line at every chapter change,
# drop trailing whitespace.
LC_ALL=C awk '
{
    if (match($0, /^[1-3]?[A-Za-z]+[0-9]+:[0-9]+ /) == 0) { print "bad line " NR ": " $0 > "/dev/stderr"; exit 1 }
    ref = substr($0, 1, RLENGTH - 1); text = substr($0, RLENGTH + 1)
    sub(/:[0-9]+$/, "", ref)             # "Ge1:1" -> "Ge1" (book + chapter)
    sub(/[ \t\r]+$/, "", text)
    if (NR > 1 && ref != prev) print ""
    prev = ref
    print text
}' raw.txt > "$OUT.tmp"
mv "$OUT.tmp" "$OUT"

verses=$(grep -c . "$OUT")
chapters=$(( $(grep -c '^$' "$OUT") + 1 ))
sha=$(sha256sum "$OUT" | cut -d' ' -f1)
echo "wrote $OUT: $(wc -c < "$OUT") bytes, $verses verses, $chapters chapters"
echo "sha256 $sha"
if [ "$verses" -ne 31102 ] || [ "$chapters" -ne 1189 ]; then
    echo "error: expected 31102 verses and 1189 chapters" >&2; exit 1
fi
if [ -n "$EXPECTED_SHA256" ] && [ "$sha" != "$EXPECTED_SHA256" ]; then
    echo "warning: sha256 differs from expected $EXPECTED_SHA256" >&2
fi
