#!/usr/bin/env bash
# scripts/real-corpus.sh on a tiny Debian-like root: documentation pages and man pages become
# deduplicated training and validation documents, the tokenizer sees the training split only, the
# shards keep the split as made, the Bible and the fortunes become the out-of-distribution texts;
# a missing source is one line naming it and its package, and leaves nothing behind.
source "$(dirname "$0")/common.sh"
PY=/usr/bin/python3
for tool in man bible; do
  command -v "$tool" > /dev/null || fail "no $tool: run scripts/install-deps.sh (man-db, bible-kjv)"
done
[ -f /usr/lib/bible.data ] || fail "no /usr/lib/bible.data: run scripts/install-deps.sh (bible-kjv)"

R="$WORK/root"
kernel="$R/usr/share/doc/linux-doc-6.1/html/_sources"
python="$R/usr/share/doc/python3.11/html/_sources"
mkdir -p "$kernel/sub" "$python" "$R/usr/share/man/man2" "$R/usr/share/man/man3" \
  "$R/var/lib/dpkg/info" "$R/usr/lib" "$R/usr/share/games/fortunes"
for i in $(seq 1 40); do
  printf '.. SPDX-License-Identifier: GPL-2.0\n\n.. _label%s:\n\nKernel page %s\n==============\n\nThe scheduler picks task %s.\n' \
    "$i" "$i" "$i" > "$kernel/sub/page$i.rst.txt"
  printf 'Python page %s\n\nThe list holds %s items.\n' "$i" "$i" > "$python/lib$i.rst.txt"
done
cp "$kernel/sub/page1.rst.txt" "$kernel/copy-of-page1.rst.txt"  # an exact duplicate
printf '.TH OPEN 2\n.SH NAME\nopen \\- open a file\n.SH DESCRIPTION\nOpens a file by name.\n' |
  gzip > "$R/usr/share/man/man2/open.2.gz"
printf '.so man2/open.2\n' | gzip > "$R/usr/share/man/man2/creat.2.gz"  # points at open(2)
printf '.TH PRINTF 3\n.SH NAME\nprintf \\- formatted output\n' | gzip > "$R/usr/share/man/man3/printf.3.gz"
printf '/usr/share/man/man2/open.2.gz\n/usr/share/man/man2/creat.2.gz\n' > "$R/var/lib/dpkg/info/manpages-dev.list"
printf '/usr/share/man/man3/printf.3.gz\n/usr/share/man\n' > "$R/var/lib/dpkg/info/manpages.list"
printf 'Package: manpages\nVersion: 6.03-2\n\nPackage: bible-kjv\nVersion: 4.38\n' > "$R/var/lib/dpkg/status"
cp /usr/lib/bible.data /usr/lib/bible.data.conc "$R/usr/lib/"
printf 'A fortune.\n%%\nAnother one,\non two lines.\n%%\nA fortune.\n%%\n' > "$R/usr/share/games/fortunes/wisdom"
printf 'index' > "$R/usr/share/games/fortunes/wisdom.dat"  # not text: skipped

OUT="$WORK/corpus"
bash "$ROOT/scripts/real-corpus.sh" --root "$R" --out "$OUT" --vocab-size 300 --k3lab "$K3LAB" \
  > "$WORK/made.out" 2> "$WORK/made.err" || fail "real-corpus: $(cat "$WORK/made.err")"
$PY - "$OUT" <<'PY' || fail "the corpus"
import json, os, sys
out = sys.argv[1]
train = [json.loads(l)["text"] for l in open(out + "/text/train.jsonl")]
val = [json.loads(l)["text"] for l in open(out + "/text/validation.jsonl")]
docs = train + val
assert len(docs) == 40 + 40 + 2, len(docs)  # one kernel duplicate and the .so page dropped
assert len(val) >= 1 and len(train) >= 60, (len(train), len(val))
assert not set(train) & set(val)
assert sum("Kernel page 1\n" in d for d in docs) == 1, "the duplicate was kept"
assert not any("SPDX" in d or ".. _label" in d for d in docs), "Sphinx-only lines kept"
man = [d for d in docs if "open - open a file" in d]
assert len(man) == 1 and "Opens a file by name." in man[0], docs[-3:]
assert open(out + "/text/train.txt").read() == "".join(t + "\n\n" for t in train)
manifest = json.load(open(out + "/shards/manifest.json"))
assert manifest["splits"]["train"]["documents"] == len(train), manifest["splits"]
assert manifest["splits"]["validation"]["documents"] == len(val), manifest["splits"]
bible = open(out + "/ood/bible.txt").read()
assert "In the beginning God created the heaven and the earth." in bible
assert "Ge1:1" not in bible and len(bible.split("\n\n")) == 1189  # chapters, references dropped
assert sorted(d.strip() for d in open(out + "/ood/fortunes.txt").read().split("\n\n")) == \
    ["A fortune.", "Another one,\non two lines."], "fortunes"
rows = [l.rstrip("\n").split("\t") for l in open(out + "/sources.tsv")][1:]
by = {r[0]: r for r in rows}
assert set(by) == {"kernel", "python", "man", "bible", "fortunes"}, by
assert by["kernel"][9] == "1" and by["fortunes"][9] == "1", rows  # duplicates dropped
assert by["man"][3] == "6.03-2 ?" and by["bible"][3] == "4.38", rows
PY
train_bytes=$(stat -c %s "$OUT/text/train.txt")
grep -q "^trained on $train_bytes bytes" "$WORK/made.out" || fail "the tokenizer saw more than the training split: $(cat "$WORK/made.out")"
[ -f "$OUT/tokenizer/tiktoken.model" ] || fail "no tokenizer"
echo "ok: documents deduplicated and split, the tokenizer on the training split, the split kept in the shards"

# A source missing: one line naming it and its package; nothing written.
rm -r "$python"
expect_error "missing source python: .*package python3-doc" \
  bash "$ROOT/scripts/real-corpus.sh" --root "$R" --out "$WORK/none" --k3lab "$K3LAB"
[ ! -e "$WORK/none" ] && ! compgen -G "$WORK/.none.partial-*" > /dev/null || fail "a failed run left files"
expect_error "real-corpus: $OUT exists" bash "$ROOT/scripts/real-corpus.sh" --out "$OUT" --k3lab "$K3LAB"
