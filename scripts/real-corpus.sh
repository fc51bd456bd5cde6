#!/usr/bin/env bash
# A real-text corpus from Debian-packaged documentation (docs/real-text.md):
#
#   scripts/real-corpus.sh --out DIR [--install] [--root ROOT] [--vocab-size N] [--k3lab PATH]
#
# 1. text: the kernel's and Python's documentation and the Linux man pages, as plain text,
#    deduplicated and split by document into DIR/text/{train,validation}.jsonl; the King James
#    Bible and the fortune cookies as two out-of-distribution texts, DIR/ood/{bible,fortunes}.txt;
#    each source's package, version, license and size in DIR/sources.tsv (scripts/real_corpus.py);
# 2. a byte-level BPE trained on the training documents only: DIR/tokenizer;
# 3. shards of both splits, the split kept as made in step 1: DIR/shards.
#
# --install installs the packages first (apt-get); without it a missing source is one line
# naming it and its package, and nothing is written.
set -euo pipefail

out="" root="/" install=0 vocab=1024
k3lab="$(cd "$(dirname "$0")/.." && pwd)/build/release/k3lab"
here="$(cd "$(dirname "$0")" && pwd)"
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    --root) root="$2"; shift 2 ;;
    --install) install=1; shift ;;
    --vocab-size) vocab="$2"; shift 2 ;;
    --k3lab) k3lab="$(realpath "$2")"; shift 2 ;;
    *) echo "real-corpus: unknown argument '$1' (expected --out, --root, --install, --vocab-size, --k3lab)" >&2; exit 2 ;;
  esac
done
[ -n "$out" ] || { echo "real-corpus: --out DIR is required" >&2; exit 2; }
[ ! -e "$out" ] || { echo "real-corpus: $out exists; give a new directory" >&2; exit 2; }
[ -x "$k3lab" ] || { echo "real-corpus: no k3lab at $k3lab (build it: cmake --build --preset release)" >&2; exit 2; }

if [ "$install" = 1 ]; then
  "$here/install-deps.sh" linux-doc python3-doc manpages manpages-dev man-db groff-base \
    bible-kjv fortunes
fi

# Everything is made in a hidden sibling, renamed to OUT once complete.
partial="$(dirname "$out")/.$(basename "$out").partial-$$"
trap 'rm -rf "$partial"' EXIT
mkdir -p "$partial"
python3 "$here/real_corpus.py" --root "$root" --out "$partial"
# Relative paths inside it: the shards' manifest names the tokenizer as "tokenizer".
(
  cd "$partial"
  "$k3lab" tokenizer train --input text/train.txt --vocab-size "$vocab" --out tokenizer
  "$k3lab" data prepare --input text/train.jsonl text/validation.jsonl --val-fraction 0 1 \
    --tokenizer tokenizer --out shards --quiet
)
mv "$partial" "$out"
trap - EXIT
echo "real-corpus: wrote $out"
