#!/bin/sh
# Regenerates the tokenizer goldens in tests/data/tok/ with the pinned
# reference (bench/reference/build.sh cpu first): the corpus of
# tools/tok_corpus.py tokenized by llama_tokenize without and with special
# parsing, and the reference's token attribute table.
# Needs Debian packages jargon-text, bible-kjv and gettext (msgunfmt).
. "$(dirname "$0")/ref_env.sh"
cc -O2 -I$R/include -I$R/ggml/include tools/ref_tokenize.c -L$bin -lllama -Wl,-rpath,"$root/$bin" -o "$tmp/ref_tokenize"
cc -O2 -I$R/include -I$R/ggml/include tools/ref_vocab_attrs.c -L$bin -lllama -Wl,-rpath,"$root/$bin" -o "$tmp/ref_attrs"
vocab=data/vocab/gemma-4.gguf
python3 tools/tok_corpus.py "$tmp/corpus.inp"
"$tmp/ref_tokenize" $vocab "$tmp/corpus.inp" > "$tmp/corpus.plain.out"
"$tmp/ref_tokenize" $vocab "$tmp/corpus.inp" special > "$tmp/corpus.special.out"
for f in corpus.inp corpus.plain.out corpus.special.out; do gzip -9 -n -c "$tmp/$f" > tests/data/tok/$f.gz; done
"$tmp/ref_attrs" $vocab 2>/dev/null > tests/data/tok/gemma4-attrs.txt
echo "tokenizer goldens written to tests/data/tok/"
