#!/usr/bin/env python3
"""Builds the demo model's training corpus from Debian packages of
public-domain English text, tokenized with gem's Gemma 4 tokenizer.

  tools/demo_corpus.py [OUT_DIR]      (default build/demo; needs ./gem, apt-get, dpkg)

Sources (licences checked in each package's copyright file; models/README.md):
  bible-kjv-text + bible-kjv   King James Version (1611), copyright expired
  dict-devil                   Ambrose Bierce, The Devil's Dictionary (1911), public domain
  dict-jargon                  The Jargon File 4.4.7 (2003), public domain

Documents are Bible chapters and dictionary entries. Every 20th document (in
source order) is held out for perplexity. Writes train.txt / test.txt (the
documents separated by blank lines: the file llama-perplexity and gem
perplexity read), train.ids / test.ids (uint32 little endian; each document
as <bos> text <eos>, the stream the trainer samples windows from), ppl.ids
and prompt.ids (the trainer's oracle inputs) and
manifest.json (package versions and SHA-256 of every input and output), so a
rerun can be checked byte for byte. Standard library only."""
import hashlib
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import zlib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ["bible-kjv", "bible-kjv-text", "dict-devil", "dict-jargon"]
BOS, EOS = 2, 1
HOLD_EVERY = 20
PROMPT = "In the beginning"  # make run's prompt


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def fetch(work):
    debs = os.path.join(work, "debs")
    os.makedirs(debs, exist_ok=True)
    if not all(any(f.startswith(p + "_") for f in os.listdir(debs)) for p in PACKAGES):
        subprocess.run(["apt-get", "download"] + PACKAGES, cwd=debs, check=True,
                       stdout=subprocess.DEVNULL)
    root = os.path.join(work, "root")
    shutil.rmtree(root, ignore_errors=True)
    info = {}
    for f in sorted(os.listdir(debs)):
        if not f.endswith(".deb"):
            continue
        subprocess.run(["dpkg", "-x", os.path.join(debs, f), root], check=True)
        info[f] = sha256(os.path.join(debs, f))
    return root, info


def kjv_docs(root):
    out = subprocess.run([os.path.join(root, "usr/bin/bible"), "-p", os.path.join(root, "usr/lib"),
                          "gen1:1-rev22:21"], check=True, capture_output=True, env={"COLUMNS": "100000"}).stdout
    docs, title, verses = [], None, []
    for line in out.decode("utf-8").split("\n"):
        m = re.match(r"^\s+(\d+) (.*)$", line)
        if m:
            verses.append(m.group(2).strip())
        elif line.strip() and not line.startswith(" "):
            if title and verses:
                docs.append(title + "\n\n" + "\n".join(verses))
            title, verses = line.strip(), []
        elif line.strip() and verses:  # a wrapped verse continues
            verses[-1] += " " + line.strip()
    if title and verses:
        docs.append(title + "\n\n" + "\n".join(verses))
    return docs


B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def b64num(s):
    n = 0
    for c in s:
        n = n * 64 + B64.index(c)
    return n


def dict_entries(root, name):
    d = os.path.join(root, "usr/share/dictd")
    with open(os.path.join(d, name + ".dict.dz"), "rb") as f:
        data = zlib.decompress(f.read(), 16 + zlib.MAX_WBITS)
    ents = []
    with open(os.path.join(d, name + ".index"), encoding="utf-8") as f:
        for line in f:
            word, off, ln = line.rstrip("\n").split("\t")[:3]
            if word.startswith("00database") or word.startswith("00-database"):
                continue
            ents.append((b64num(off), b64num(ln)))
    seen, texts = set(), []
    for off, ln in sorted(set(ents)):  # source order; several headwords can share one entry
        if off in seen:
            continue
        seen.add(off)
        texts.append(data[off:off + ln].decode("utf-8"))
    return texts


def reflow(text):
    """Joins the lines of each paragraph; keeps indented verse (lines with
    leading spaces after a paragraph break in The Devil's Dictionary) as is."""
    paras = re.split(r"\n\s*\n", text.strip("\n"))
    out = []
    for p in paras:
        lines = p.split("\n")
        if all(l.startswith("    ") for l in lines) and len(lines) > 1 and not all(len(l) > 60 for l in lines[:-1]):
            out.append("\n".join(l.strip() for l in lines))  # a poem
        else:
            out.append(" ".join(l.strip() for l in lines))
    return "\n\n".join(out)


def devil_docs(root):
    return [reflow(t) for t in dict_entries(root, "devil") if t.strip()]


def jargon_docs(root):
    docs = []
    for t in dict_entries(root, "jargon"):
        t = t.replace("{", "").replace("}", "")
        lines = t.strip("\n").split("\n")
        head = lines[0].strip()
        rest = "\n".join(lines[1:])
        pron = ""
        m = re.match(r"^ (\S[^\n]*)\n", rest)  # pronunciation and part of speech
        if m:
            pron, rest = m.group(1).strip(), rest[m.end():]
        body = reflow(rest)
        if body:
            docs.append(head + (" " + pron if pron and pron != "//" else "") + "\n\n" + body)
    return docs


def tokenize(gem, vocab, docs):
    """One gem tokenize call over all documents joined by <eos><bos>
    (control tokens parsed with --special; the texts contain no '<' that
    could form one, checked below)."""
    for d in docs:
        if "<bos>" in d or "<eos>" in d:
            raise SystemExit("a document contains a control token string")
    text = "<bos>" + "<eos><bos>".join(docs) + "<eos>"
    out = subprocess.run([gem, "tokenize", "-m", vocab, "--no-bos", "--special"], input=text.encode("utf-8"),
                         check=True, capture_output=True).stdout
    ids = [int(x) for x in out.split()]
    if ids.count(BOS) != len(docs) or ids.count(EOS) != len(docs):
        raise SystemExit("tokenized stream does not hold one <bos> and one <eos> per document")
    return ids


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build", "demo")
    os.makedirs(out, exist_ok=True)
    root, debs = fetch(out)
    sources = {"kjv": kjv_docs(root), "devil": devil_docs(root), "jargon": jargon_docs(root)}
    train, test = [], []
    for name in ("kjv", "devil", "jargon"):
        for i, d in enumerate(sources[name]):
            (test if i % HOLD_EVERY == HOLD_EVERY - 1 else train).append(d)
    gem = os.path.join(ROOT, "gem")
    vocab = os.path.join(ROOT, "data", "vocab", "gemma-4.gguf")
    man = {"packages": debs, "documents": {k: len(v) for k, v in sources.items()},
           "hold_out": "every %dth document of each source" % HOLD_EVERY, "files": {}}
    for split, docs in (("train", train), ("test", test)):
        with open(os.path.join(out, split + ".txt"), "w", encoding="utf-8") as f:
            f.write("\n\n".join(docs) + "\n")
        ids = tokenize(gem, vocab, docs)
        with open(os.path.join(out, split + ".ids"), "wb") as f:
            f.write(struct.pack("<%dI" % len(ids), *ids))
        man[split] = {"documents": len(docs), "tokens": len(ids)}
    # the trainer's oracle inputs: test.txt as llama-perplexity reads it (one
    # trailing newline dropped, <bos> first) and the make-run prompt
    with open(os.path.join(out, "test.txt"), "rb") as f:
        text = f.read()
    for name, data in (("ppl.ids", text[:-1] if text.endswith(b"\n") else text), ("prompt.ids", PROMPT.encode())):
        ids = [int(x) for x in subprocess.run([gem, "tokenize", "-m", vocab], input=data, check=True,
                                              capture_output=True).stdout.split()]
        with open(os.path.join(out, name), "wb") as f:
            f.write(struct.pack("<%dI" % len(ids), *ids))
    for fn in ("train.txt", "test.txt", "train.ids", "test.ids", "ppl.ids", "prompt.ids"):
        man["files"][fn] = sha256(os.path.join(out, fn))
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(man, f, indent=1, sort_keys=True)
    print(json.dumps({k: man[k] for k in ("documents", "train", "test")}))


if __name__ == "__main__":
    main()
