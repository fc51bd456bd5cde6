#!/usr/bin/env python3
"""The text half of scripts/real-corpus.sh: Debian-packaged documentation turned into an English
training corpus (plain text, deduplicated, split by document) and two out-of-distribution texts.

    real_corpus.py --root ROOT --out DIR [--val-percent P]

Reads, under ROOT (/ on an installed system):
  kernel   usr/share/doc/linux-doc-*/html/_sources/**/*.rst.txt   (package linux-doc-VERSION)
  python   usr/share/doc/python3.*/html/_sources/**/*.rst.txt     (package python3.X-doc)
  man      the section 2-7 pages listed by var/lib/dpkg/info/{manpages,manpages-dev}.list,
           rendered by man(1) at 80 columns
  bible    usr/lib/bible.data, printed by bible(1)                 (package bible-kjv)
  fortunes usr/share/games/fortunes/*, "%"-separated               (package fortunes)

Writes DIR/text/train.jsonl (and the same as DIR/text/train.txt), DIR/text/validation.jsonl, DIR/ood/bible.txt, DIR/ood/fortunes.txt
and DIR/sources.tsv. A missing source is one line on stderr naming it and its package, exit 2.
"""
import argparse
import glob
import gzip
import hashlib
import json
import os
import random
import re
import subprocess
import sys

LICENSES = {
    "kernel": "GPL-2.0 (a few files dual-licensed, as their SPDX lines say)",
    "python": "PSF License Agreement (Python documentation)",
    "man": "Linux man-pages licenses (mostly verbatim-copying and GPL/BSD; see the package's copyright)",
    "bible": "public domain (King James Version, 1611)",
    "fortunes": "BSD-style (fortune-mod's data; see the package's copyright)",
}


def fail(message):
    print(f"real-corpus: {message}", file=sys.stderr)
    sys.exit(2)


def newest(paths):
    def key(p):
        return [int(x) for x in re.findall(r"\d+", p)]
    return sorted(paths, key=key)[-1] if paths else None


def package_versions(root):
    versions, name = {}, None
    try:
        with open(os.path.join(root, "var/lib/dpkg/status"), encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("Package: "):
                    name = line.split(": ", 1)[1].strip()
                elif line.startswith("Version: ") and name:
                    versions[name] = line.split(": ", 1)[1].strip()
    except OSError:
        pass
    return versions


RST_DROP = re.compile(r"^\.\. (SPDX-License-Identifier|_[^:]*:|toctree::|include::|only::|"
                      r"highlight::|kernel-doc::|index::|raw::|c:namespace|contents::|literalinclude::)")


def clean_rst(text):
    """reStructuredText kept as people read it; the lines that only steer Sphinx are dropped
    (labels, license tags, toctrees, includes and their indented options)."""
    out, skipping = [], False
    for line in text.splitlines():
        if RST_DROP.match(line):
            skipping = True
            continue
        if skipping and (line.startswith("   ") or not line.strip()):
            if not line.strip():
                skipping = False
            continue
        skipping = False
        out.append(line.rstrip())
    return "\n".join(out)


def tidy(text):
    """Trailing spaces off, runs of blank lines to one, no blank edges."""
    text = "\n".join(line.rstrip() for line in text.splitlines())
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def sphinx_sources(root, pattern, what, package_hint):
    top = newest(glob.glob(os.path.join(root, pattern)))
    if not top:
        fail(f"missing source {what}: no {os.path.join(root, pattern)} "
             f"(package {package_hint}; install it, or run scripts/real-corpus.sh --install)")
    docs = []
    for path in sorted(glob.glob(os.path.join(top, "**", "*.rst.txt"), recursive=True)):
        with open(path, encoding="utf-8", errors="replace") as f:
            docs.append((os.path.relpath(path, top), tidy(clean_rst(f.read()))))
    if not docs:
        fail(f"missing source {what}: {top} holds no .rst.txt files")
    package = os.path.basename(os.path.dirname(os.path.dirname(top)))
    return package, docs


def man_pages(root):
    pages = []
    for package in ("manpages", "manpages-dev"):
        listing = os.path.join(root, f"var/lib/dpkg/info/{package}.list")
        if not os.path.exists(listing):
            fail(f"missing source man: no {listing} (package {package}; install it, or run "
                 f"scripts/real-corpus.sh --install)")
        with open(listing, encoding="utf-8") as f:
            for line in f:
                path = line.strip()
                if re.search(r"/man/man[2-7]/[^/]+$", path):
                    pages.append(os.path.join(root, path.lstrip("/")))
    docs = []
    env = dict(os.environ, MANWIDTH="80", MAN_KEEP_FORMATTING="0", LC_ALL="C.UTF-8")
    for path in sorted(p for p in pages if os.path.isfile(p) and not os.path.islink(p)):
        raw = gzip.open(path).read() if path.endswith(".gz") else open(path, "rb").read()
        if raw.lstrip().startswith(b".so "):
            continue  # a page that only points at another one
        shown = subprocess.run(["man", "-l", "-"], input=raw, env=env, capture_output=True)
        if shown.returncode != 0:
            fail(f"man could not render {path}: {shown.stderr.decode(errors='replace').strip()}")
        text = re.sub(r".\x08", "", shown.stdout.decode("utf-8", errors="replace"))
        # man indents the body by 7 columns: dropped, the page's own indentation kept.
        lines = [line[7:] if line.startswith(" " * 7) else line for line in text.splitlines()]
        docs.append((os.path.relpath(path, root), tidy("\n".join(lines))))
    if not docs:
        fail("missing source man: the manpages packages list no pages")
    return docs


def bible_chapters(root):
    data = os.path.join(root, "usr/lib/bible.data")
    if not os.path.exists(data):
        fail(f"missing source bible: no {data} (package bible-kjv; install it, or run "
             f"scripts/real-corpus.sh --install)")
    shown = subprocess.run(["bible", "-p", os.path.dirname(data), "-f", "gen1:1-rev22:21"],
                           capture_output=True)
    if shown.returncode != 0 or not shown.stdout:
        fail(f"bible could not print {data}: {shown.stderr.decode(errors='replace').strip()}")
    chapters = {}
    for line in shown.stdout.decode("utf-8", errors="replace").splitlines():
        m = re.match(r"^(\w+?)(\d+):\d+ (.*)$", line)
        if m:
            chapters.setdefault(m.group(1) + m.group(2), []).append(m.group(3).strip())
        elif line.strip() and chapters:  # a verse wrapped by bible(1)
            chapters[list(chapters)[-1]][-1] += " " + line.strip()
    return [(name, " ".join(verses)) for name, verses in chapters.items()]


def fortunes(root):
    top = os.path.join(root, "usr/share/games/fortunes")
    files = sorted(p for p in glob.glob(os.path.join(top, "*"))
                   if os.path.isfile(p) and not os.path.islink(p) and "." not in os.path.basename(p))
    if not files:
        fail(f"missing source fortunes: no files in {top} (package fortunes; install it, or run "
             f"scripts/real-corpus.sh --install)")
    docs = []
    for path in files:
        with open(path, encoding="utf-8", errors="replace") as f:
            for i, entry in enumerate(re.split(r"^%\s*$", f.read(), flags=re.M)):
                if entry.strip():
                    docs.append((f"{os.path.basename(path)}:{i}", tidy(entry)))
    return docs


def key(text):
    return hashlib.sha256(" ".join(text.split()).lower().encode()).hexdigest()


def dedup(docs, seen):
    """Exact duplicates (up to case and spacing) dropped, the first kept, across all sources."""
    kept = []
    for name, text in docs:
        k = key(text)
        if text and k not in seen:
            seen.add(k)
            kept.append((name, text))
    return kept


def is_validation(source, name, percent):
    """By a hash of the document's name: stable as sources grow or shrink."""
    h = int(hashlib.sha256(f"{source}:{name}".encode()).hexdigest()[:8], 16)
    return h % 1000 < percent * 10


def write_ood(path, docs):
    """Shuffled (seed 0) so that the last share, which `k3lab eval --data` scores, is a sample of
    the whole text; documents separated by a blank line."""
    docs = [text for _, text in docs]
    random.Random(0).shuffle(docs)
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n\n".join(re.sub(r"\n\s*\n", "\n", d) for d in docs) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default="/")
    ap.add_argument("--out", required=True)
    ap.add_argument("--val-percent", type=float, default=5.0)
    args = ap.parse_args()
    versions = package_versions(args.root)
    kernel_pkg, kernel = sphinx_sources(args.root, "usr/share/doc/linux-doc-*/html/_sources",
                                        "kernel", "linux-doc")
    python_pkg, python = sphinx_sources(args.root, "usr/share/doc/python3.*/html/_sources",
                                        "python", "python3-doc")
    python_pkg = python_pkg + "-doc"
    man = man_pages(args.root)
    bible = bible_chapters(args.root)
    fortune = fortunes(args.root)

    os.makedirs(os.path.join(args.out, "text"), exist_ok=True)
    os.makedirs(os.path.join(args.out, "ood"), exist_ok=True)
    seen, rows = set(), []
    # train.txt: the same training documents as plain text, for the tokenizer's training.
    with open(os.path.join(args.out, "text/train.jsonl"), "w", encoding="utf-8") as train, \
         open(os.path.join(args.out, "text/train.txt"), "w", encoding="utf-8") as train_text, \
         open(os.path.join(args.out, "text/validation.jsonl"), "w", encoding="utf-8") as val:
        for source, package, docs in (("kernel", kernel_pkg, kernel), ("python", python_pkg, python),
                                      ("man", "manpages manpages-dev", man)):
            kept = dedup(docs, seen)
            counts = {"train": [0, 0], "validation": [0, 0]}
            for name, text in kept:
                split = "validation" if is_validation(source, name, args.val_percent) else "train"
                (val if split == "validation" else train).write(json.dumps({"text": text}) + "\n")
                if split == "train":
                    train_text.write(text + "\n\n")
                counts[split][0] += 1
                counts[split][1] += len(text.encode())
            rows.append((source, "training", package, counts, len(docs) - len(kept)))
    for source, package, docs in (("bible", "bible-kjv", bible), ("fortunes", "fortunes", fortune)):
        kept = dedup(docs, set())
        write_ood(os.path.join(args.out, "ood", source + ".txt"), kept)
        rows.append((source, "out of distribution", package,
                     {"train": [0, 0], "validation": [len(kept), sum(len(t.encode()) for _, t in kept)]},
                     len(docs) - len(kept)))
    with open(os.path.join(args.out, "sources.tsv"), "w", encoding="utf-8") as f:
        f.write("source\trole\tpackages\tversions\tlicense\ttrain_documents\ttrain_bytes\t"
                "validation_documents\tvalidation_bytes\tduplicates_dropped\n")
        for source, role, package, c, dropped in rows:
            v = " ".join(versions.get(p, "?") for p in package.split())
            f.write(f"{source}\t{role}\t{package}\t{v}\t{LICENSES[source]}\t{c['train'][0]}\t"
                    f"{c['train'][1]}\t{c['validation'][0]}\t{c['validation'][1]}\t{dropped}\n")
            print(f"{source:9s} {role:20s} {c['train'][0]:6d} + {c['validation'][0]:5d} documents, "
                  f"{c['train'][1] / 1e6:7.2f} + {c['validation'][1] / 1e6:5.2f} MB, "
                  f"{dropped} duplicates dropped ({package} {v})")


if __name__ == "__main__":
    main()
