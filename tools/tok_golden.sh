#!/bin/sh
# Regenerates the tokenizer goldens in tests/data/tok/ with the pinned
# reference (bench/reference/build.sh cpu first): the corpus of
# tools/tok_corpus.py tokenized by llama_tokenize without and with special
# parsing, and the reference's token attribute table, for each vocabulary
# named (gemma4, qwen35; default both).
# Needs Debian packages jargon-text, bible-kjv and gettext (msgunfmt).
. "$(dirname "$0")/ref_env.sh"
cc -O2 -I$R/include -I$R/ggml/include tools/ref_tokenize.c -L$bin -lllama -Wl,-rpath,"$root/$bin" -o "$tmp/ref_tokenize"
cc -O2 -I$R/include -I$R/ggml/include tools/ref_vocab_attrs.c -L$bin -lllama -Wl,-rpath,"$root/$bin" -o "$tmp/ref_attrs"
gen() { # vocab file, golden name prefix, attribute table, corpus options
    python3 tools/tok_corpus.py "$tmp/$2corpus.inp" $4
    "$tmp/ref_tokenize" "$1" "$tmp/$2corpus.inp" > "$tmp/$2corpus.plain.out"
    "$tmp/ref_tokenize" "$1" "$tmp/$2corpus.inp" special > "$tmp/$2corpus.special.out"
    for f in corpus.inp corpus.plain.out corpus.special.out; do gzip -9 -n -c "$tmp/$2$f" > "tests/data/tok/$2$f.gz"; done
    "$tmp/ref_attrs" "$1" 2>/dev/null > "tests/data/tok/$3"
}
for v in ${@:-gemma4 qwen35}; do
    case $v in
    gemma4) gen data/vocab/gemma-4.gguf "" gemma4-attrs.txt ;;
    qwen35) gen data/vocab/qwen35.gguf qwen35- qwen35-attrs.txt "--vocab qwen35" ;;
    *) echo "unknown vocabulary $v (gemma4, qwen35)" >&2; exit 1 ;;
    esac
done
echo "tokenizer goldens written to tests/data/tok/"
