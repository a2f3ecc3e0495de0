#!/usr/bin/env python3
"""Builds the tokenizer golden corpus: many inputs separated by the reference's
vocab-test separator, written as raw bytes. Sources (all on a Debian machine,
licences in THIRD_PARTY.md): the Jargon File (public domain, package
jargon-text), the King James Bible (public domain, package bible-kjv),
translations from .mo catalogues of many locales (msgstr strings: prose in
many scripts), gem's own sources, and generated text: code in several
languages, emoji, whitespace runs, control-token strings, invalid UTF-8 and a
very long line. Deterministic: fixed seed, sorted file lists.

With --vocab qwen35 the control-token strings are Qwen's (ChatML, thinking
and tool-call markers, padding tokens) and cases aimed at its pre-tokenizer
follow: English contractions in any case, combining marks, numbers of
every script, white space of every kind around letters, punctuation before
line breaks. The Gemma corpus (no option) is unchanged.

usage: tok_corpus.py OUT.inp [--vocab qwen35]
"""
import glob
import gzip
import os
import random
import re
import subprocess
import sys

SEP = b"\n__ggml_vocab_test__\n"
QWEN = "--vocab" in sys.argv and sys.argv[sys.argv.index("--vocab") + 1] == "qwen35"
rng = random.Random(20261206 if QWEN else 20261202)
cases = []


def add(b):
    if isinstance(b, str):
        b = b.encode("utf-8")
    assert SEP not in b
    cases.append(b)


def chunks(text, lo, hi, limit):
    out, pos, total = [], 0, 0
    while pos < len(text) and total < limit:
        n = rng.randint(lo, hi)
        piece = text[pos:pos + n]
        out.append(piece)
        pos += n
        total += len(piece)
    return out


# --- English prose ---
jargon = gzip.open("/usr/share/doc/jargon-text/jargon.txt.gz").read().decode("utf-8", "replace")
for c in chunks(jargon[20000:], 200, 6000, 450_000):
    add(c)
kjv = subprocess.run(["bible", "-f", "Genesis 1:1-12:20", "Psalms 1:1-40:17", "John 1:1-10:42"],
                     capture_output=True, text=True).stdout
for c in chunks(kjv, 300, 5000, 350_000):
    add(c)

# --- prose in many scripts: translated message catalogues ---
LOCALES = ["ru", "uk", "el", "ar", "fa", "he", "hi", "bn", "ta", "te", "th", "ka", "hy", "am",
           "ja", "zh_CN", "zh_TW", "ko", "km", "my", "si", "gu", "pa", "ml", "vi", "tr", "pl", "de", "fr", "es"]


def msgstrs(mo):
    out = subprocess.run(["msgunfmt", mo], capture_output=True, text=True, errors="replace").stdout
    strs, cur = [], None
    for line in out.splitlines():
        if line.startswith("msgstr"):
            if cur:
                strs.append(cur)
            m = re.match(r'msgstr(\[\d+\])? "(.*)"$', line)
            cur = m.group(2) if m else ""
        elif line.startswith('"') and cur is not None:
            cur += line[1:-1]
        else:
            if cur:
                strs.append(cur)
            cur = None
    if cur:
        strs.append(cur)
    return [s.replace("\\n", "\n").replace('\\"', '"').replace("\\t", "\t").replace("\\\\", "\\") for s in strs]


for loc in LOCALES:
    texts = []
    for mo in sorted(glob.glob(f"/usr/share/locale/{loc}/LC_MESSAGES/*.mo")):
        texts += msgstrs(mo)
        if sum(map(len, texts)) > 60_000:
            break
    body = " ".join(t for t in texts if t.strip())
    for c in chunks(body, 200, 3000, 40_000):
        add(c)

# --- source code: gem's own files, and generated code in other languages ---
root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for path in sorted(glob.glob(os.path.join(root, "src/*/*.[ch]")) + [os.path.join(root, "Makefile"),
                                                                     os.path.join(root, "tests/run.sh")]):
    for c in chunks(open(path, encoding="utf-8").read(), 500, 8000, 40_000):
        add(c)

words = re.findall(r"[a-z]{3,12}", jargon.lower())[:50000]


def ident():
    return "_".join(rng.choice(words) for _ in range(rng.randint(1, 3)))


def gen_python():
    name = ident()
    args = ", ".join(ident() for _ in range(rng.randint(0, 4)))
    body = []
    for _ in range(rng.randint(2, 8)):
        v = ident()
        body.append(rng.choice([
            f"    {v} = [{ident()}(x) for x in range({rng.randint(1, 999)}) if x % {rng.randint(2, 9)} == 0]",
            f"    if {v} is None or len({v}) > {rng.randint(1, 64)}:\n        raise ValueError(f\"bad {{{v}!r}}\")",
            f"    # {' '.join(rng.choice(words) for _ in range(rng.randint(3, 12)))}",
            f"    {v} = {{'{ident()}': {rng.random():.6f}, \"{ident()}\": [{rng.randint(-9, 9)}, None, True]}}",
            f"    for i, {v} in enumerate({ident()}):\n        yield i ** 2 // 3, {v}.strip().lower()",
        ]))
    return f"def {name}({args}):\n    \"\"\"{' '.join(rng.choice(words) for _ in range(8))}.\"\"\"\n" + "\n".join(body) + "\n"


def gen_js():
    n = ident().replace("_", "")
    return (f"export async function {n}({ident()}, {{ {ident()}, ...rest }}) {{\n"
            f"  const {ident()} = await fetch(`/api/{n}/${{id}}?q=${{encodeURIComponent(q)}}`);\n"
            f"  if (!res.ok) throw new Error('failed: ' + res.status);\n"
            f"  return [...rest].map((x) => x?.{ident()} ?? {rng.randint(0, 100)}).filter(Boolean); // {rng.choice(words)}\n}}\n")


def gen_rust():
    n = ident()
    return (f"pub fn {n}<'a, T: Clone + Send>(xs: &'a [T], k: usize) -> Result<Vec<T>, Box<dyn std::error::Error>> {{\n"
            f"    let mut out = Vec::with_capacity(xs.len() / {rng.randint(1, 8)});\n"
            f"    for (i, x) in xs.iter().enumerate().skip(k) {{\n        if i & {rng.randint(1, 15)} == 0 {{ out.push(x.clone()); }}\n    }}\n"
            f"    Ok(out) // {' '.join(rng.choice(words) for _ in range(5))}\n}}\n")


def gen_go():
    n = ident().title().replace("_", "")
    return (f"func (s *Server) {n}(ctx context.Context, req *pb.{n}Request) (*pb.{n}Response, error) {{\n"
            f"\tif err := s.validate(req); err != nil {{\n\t\treturn nil, status.Errorf(codes.InvalidArgument, \"%v\", err)\n\t}}\n"
            f"\tfor _, item := range req.Items {{\n\t\ts.cache[item.Key] = item.Value * {rng.randint(2, 99)}\n\t}}\n"
            f"\treturn &pb.{n}Response{{Ok: true}}, nil\n}}\n")


def gen_sql():
    t = ident()
    return (f"SELECT u.{ident()}, COUNT(*) AS n, AVG(o.total)::numeric(10,2)\n  FROM {t} u\n"
            f"  LEFT JOIN orders o ON o.user_id = u.id AND o.created_at >= '2024-0{rng.randint(1, 9)}-01'\n"
            f" WHERE u.{ident()} ILIKE '%{rng.choice(words)}%'\n GROUP BY 1\nHAVING COUNT(*) > {rng.randint(1, 50)}\n ORDER BY n DESC\n LIMIT {rng.randint(5, 100)};\n")


def gen_html():
    return (f"<!DOCTYPE html>\n<html lang=\"en\">\n<head><meta charset=\"utf-8\"><title>{ident()}</title>\n"
            f"<style>.{ident()} {{ margin: 0 auto; padding: {rng.randint(0, 20)}px; color: #{rng.randint(0, 0xffffff):06x}; }}</style></head>\n"
            f"<body>\n  <div class=\"{ident()}\" data-id=\"{rng.randint(1, 9999)}\">\n    <p>{' '.join(rng.choice(words) for _ in range(12))} &amp; &lt;tag&gt;</p>\n"
            f"    <a href=\"https://example.org/{ident()}?a=1&b=2#top\">{rng.choice(words)}</a>\n  </div>\n</body>\n</html>\n")


for gen in (gen_python, gen_js, gen_rust, gen_go, gen_sql, gen_html):
    for _ in range(120):
        add("".join(gen() for _ in range(rng.randint(1, 4))))

# --- emoji ---
EMOJI = ["😀", "🎉", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇯🇵", "🇺🇸", "❤️", "🤖", "🧑🏿‍💻", "1️⃣", "🫠", "🐍", "🦀", "☕", "✅", "⚠️"]
for _ in range(300):
    parts = []
    for _ in range(rng.randint(1, 30)):
        r = rng.random()
        if r < 0.5:
            parts.append(rng.choice(EMOJI))
        elif r < 0.7:
            parts.append(chr(rng.randint(0x1F300, 0x1FAFF)))
        else:
            parts.append(rng.choice(words))
        parts.append(rng.choice(["", " ", "  ", "\n"]))
    add("".join(parts))

# --- whitespace runs ---
WS = [" ", "  ", "\t", "\n", "\r\n", "\u00a0", "\u3000", "\u2003", "\u200b", "\n\n", " \n ", "\t\t\n"]
for _ in range(400):
    add("".join(rng.choice(WS) * rng.randint(1, 12) + (rng.choice(words) if rng.random() < 0.6 else "")
                for _ in range(rng.randint(1, 10))))

# --- control-token strings ---
SPECIAL = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<|tool>", "<tool|>", "<|tool_call>", "<tool_call|>",
           "<|tool_response>", "<tool_response|>", "<|\"|>", "<|think|>", "<|channel>", "<channel|>", "<|turn>",
           "<turn|>", "<|image|>", "<|audio|>", "<|video|>", "<|image>", "<image|>", "</s>", "<start_of_turn>"]
if QWEN:
    SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "[PAD151646]", "[PAD151700]", "[PAD151935]",
               "<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>",
               "<|vision_start|>", "<|image_pad|>", "<|vision_end|>", "<|fim_prefix|>", "<|file_sep|>",
               "<function=get_weather>", "</function>", "<parameter=city>", "</parameter>", "<pad>", "<eos>"]
for _ in range(400):
    parts = []
    for _ in range(rng.randint(1, 12)):
        r = rng.random()
        if r < 0.4:
            parts.append(rng.choice(SPECIAL))
        elif r < 0.55:
            s = rng.choice(SPECIAL)
            parts.append(s[:rng.randint(1, len(s) - 1)])  # partial
        elif r < 0.65:
            parts.append("<" + rng.choice(SPECIAL) + ">")
        else:
            parts.append(rng.choice(["user\n", "model\n", "system\n", "thought\n", " ", "\n", rng.choice(words),
                                     "call:get_weather{city:<|\"|>Paris<|\"|>}", "declaration:"] if not QWEN else
                                    ["user\n", "assistant\n", "system\n", "\n\n", " ", "\n", rng.choice(words),
                                     '{"name": "get_weather", "arguments": {"city": "Paris"}}', "\nParis\n"]))
    add("".join(parts))

# --- numbers, punctuation, urls ---
for _ in range(300):
    add(" ".join(rng.choice([str(rng.randint(0, 10 ** rng.randint(1, 12))), f"{rng.random() * 1000:.4f}",
                             "2026-12-02T11:35:00Z", "user@example.com", "https://a.b/c?d=e&f=g", "$1,234.56",
                             "∑ᵢ xᵢ² ≤ ∞", "(a+b)*c/d-e^f", "¡¿«»„“”‘’…—–", rng.choice(words).upper()])
                 for _ in range(rng.randint(1, 20))))

# --- invalid UTF-8 (never forming a code point above U+10FFFF) ---
BAD = [b"\x80", b"\xbf", b"\xc0\x80", b"\xc1\xbf", b"\xe0\x80\x80", b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xf8",
       b"\xfe", b"\xff", b"\xe6\x97", b"\xf0\x9f\x8e", b"\xc3", b"\xe2\x96", b"\xf0\x90\x80\x80"]
for _ in range(300):
    parts = []
    for _ in range(rng.randint(1, 10)):
        parts.append(rng.choice(BAD) if rng.random() < 0.5 else rng.choice(words).encode() + b" ")
    add(b"".join(parts))

# --- a very long line without newlines ---
add(" ".join(rng.choice(words) for _ in range(40000)))
add("x" * 100000)

if QWEN:
    # --- contractions, any case, and near misses ---
    CONTR = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ve", "'M", "'LL", "'lL", "'D",
             "'", "''", "'x", "'r", "'v", "'l", "\u2019s", "'\u017f", "'\u0130"]
    for _ in range(300):
        add("".join(rng.choice(words) * (rng.random() < 0.8) + rng.choice(CONTR) +
                    rng.choice(["", " ", "\n", "s", "re", "'", "1"]) for _ in range(rng.randint(1, 12))))
    # --- combining marks after letters, digits, spaces, punctuation, at the start ---
    MARKS = ["\u0301", "\u0308", "\u0327", "\u0903", "\u093f", "\u0e31", "\u0e48", "\u20dd", "\ufe0f", "\u200d",
             "\u0654", "\u05b7", "\u1ab0", "\U000e0100"]
    BASES = ["e", "a", "1", " ", "\n", "(", "\u0915", "\u0e01", "\u05d0", "\u0627", "\u4e00", "\u2603", "	", "'"]
    for _ in range(400):
        add("".join(rng.choice(BASES) + "".join(rng.choice(MARKS) for _ in range(rng.randint(0, 3))) +
                    (rng.choice(words) if rng.random() < 0.3 else "") for _ in range(rng.randint(1, 20))))
    # --- numbers of every script ---
    NUMS = ["0", "42", "3.14", "1,000", "\u0661\u0662\u0663", "\u0967\u0968", "\u2460\u2461", "\u216b", "\uff11\uff12",
            "\u00b2", "\u00bd", "\U0001d7ce", "\u4e09", "\u3007", "1e-9", "0x1F", "-7"]
    for _ in range(300):
        add("".join(rng.choice(NUMS) + rng.choice(["", " ", "a", "\u0301", "\n", "%", "px"]) for _ in range(rng.randint(1, 16))))
    # --- white space of every kind around words, punctuation before line breaks ---
    SP = [" ", "  ", "\t", "\n", "\r", "\r\n", "\x0b", "\x0c", "\x85", "\xa0", "\u1680", "\u2000", "\u2003",
          "\u200a", "\u2028", "\u2029", "\u202f", "\u205f", "\u3000", "\u200b", "\ufeff", "\x1c", "\x1f"]
    PUN = ["!", "...", ":", ";", "?!", "--", "{", "}", "=>", "\u3002", "\u060c", "\u00bf", "\u2014", "\u00a9", "$", "\U0001f600"]
    for _ in range(600):
        add("".join(rng.choice(SP) * rng.randint(1, 4) + rng.choice([rng.choice(words), rng.choice(PUN), "", rng.choice(NUMS)]) +
                    (rng.choice(PUN) + rng.choice(["\n", "\r\n", "\n\n", ""]) if rng.random() < 0.4 else "")
                    for _ in range(rng.randint(1, 14))))
    # --- whole ChatML conversations ---
    for _ in range(200):
        turns = []
        for _ in range(rng.randint(1, 5)):
            role = rng.choice(["system", "user", "assistant", "tool"])
            body = " ".join(rng.choice(words) for _ in range(rng.randint(1, 40)))
            if role == "assistant" and rng.random() < 0.5:
                body = "<think>\n" + body + "\n</think>\n\n" + rng.choice(words)
            if role == "assistant" and rng.random() < 0.3:
                body += ("\n\n<tool_call>\n<function=search>\n<parameter=query>\n" + rng.choice(words) +
                         "\n</parameter>\n</function>\n</tool_call>")
            turns.append(f"<|im_start|>{role}\n{body}<|im_end|>\n")
        add("".join(turns) + "<|im_start|>assistant\n")

data = SEP.join(cases)
open(sys.argv[1], "wb").write(data)
print(f"{len(cases)} cases, {len(data)} bytes")
