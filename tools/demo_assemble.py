#!/usr/bin/env python3
"""Turns a trainer's export (tools/train_demo.py's demo.safetensors or
tools/train_demo_mtp.py's mtp.safetensors: only the embedding rows in use) into a Hugging Face checkpoint folder that
`gem convert` and the reference converter read: model.safetensors (bf16,
the full 262144-row embedding with zero rows for unused tokens), plus
config.json and the tokenizer files taken from TEMPLATE_DIR (a folder
written by tools/gguf_to_hf.py for the same profile, gemma4-demo or
gemma4-demo-assistant; the model's carries the real Gemma 4 tokenizer). Standard library only.

  demo_assemble.py TRAINED.safetensors TEMPLATE_DIR OUT_DIR"""
import json
import os
import shutil
import struct
import sys

VOCAB = 262144


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for k, v in header.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        out[k] = (v["dtype"], v["shape"], data[a:b])
    return out


def write_safetensors(path, tensors):
    header, off = {}, 0
    for k, (dt, shape, b) in tensors.items():
        header[k] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(b)]}
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for _, _, b in tensors.values():
            f.write(b)


def main():
    src, tmpl, out = sys.argv[1:4]
    t = read_safetensors(src)
    dt, (n_used,), ids_b = t.pop("model.embed_tokens.ids")
    rdt, rshape, rows = t.pop("model.embed_tokens.rows")
    H = rshape[1] if len(rshape) == 2 else -1  # the model's width
    if dt != "I32" or rdt != "BF16" or len(rshape) != 2 or rshape[0] != n_used:
        raise SystemExit("%s: unexpected embedding export (%s %s, %s %s)" % (src, dt, n_used, rdt, rshape))
    ids = struct.unpack("<%di" % n_used, ids_b)
    emb = bytearray(VOCAB * H * 2)
    row = H * 2
    for i, tok in enumerate(ids):
        if not 0 <= tok < VOCAB:
            raise SystemExit("%s: embedding id %d out of range" % (src, tok))
        emb[tok * row:(tok + 1) * row] = rows[i * row:(i + 1) * row]
    tensors = {"model.embed_tokens.weight": ("BF16", [VOCAB, H], bytes(emb))}
    for k, v in t.items():
        if v[0] != "BF16":
            raise SystemExit("%s: %s is %s, expected BF16" % (src, k, v[0]))
        tensors[k] = v
    os.makedirs(out, exist_ok=True)
    write_safetensors(os.path.join(out, "model.safetensors"), tensors)
    for fn in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        if not os.path.exists(os.path.join(tmpl, fn)):
            continue  # a drafter's folder has no tokenizer
        shutil.copyfile(os.path.join(tmpl, fn), os.path.join(out, fn))
    cfg_path = os.path.join(out, "config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    cfg["dtype"] = "bfloat16"
    with open(cfg_path, "w") as f:
        json.dump(cfg, f, indent=2)
    print("%s: %d tensors, %d embedding rows in use" % (out, len(tensors), n_used))


if __name__ == "__main__":
    main()
