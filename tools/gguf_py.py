"""A minimal GGUF reader in the Python standard library (no numpy), for the
tools that export gem-synth models to Hugging Face checkpoints and compare
GGUF files. Values are decoded to Python objects; tensor data is returned as
raw bytes (memoryview slices of an mmap), never converted."""
import mmap
import struct

TYPE_FMT = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
# ggml type id: (block size, bytes per block)
GGML = {0: (1, 4), 1: (1, 2), 30: (1, 2), 2: (32, 18), 8: (32, 34), 12: (256, 144), 14: (256, 210)}


class GGUF:
    def __init__(self, path):
        self.f = open(path, "rb")
        self.m = mmap.mmap(self.f.fileno(), 0, access=mmap.ACCESS_READ)
        self.pos = 0
        magic = self.m[0:4]
        if magic != b"GGUF":
            raise ValueError(f"{path}: not a GGUF file")
        self.pos = 4
        self.version = self._u32()
        n_tensors, n_kv = self._u64(), self._u64()
        self.kv = {}  # key -> (type, value, arr_type), insertion order = file order
        for _ in range(n_kv):
            key = self._str()
            t = self._u32()
            if t == 9:
                at = self._u32()
                n = self._u64()
                if at == 8:
                    val = [self._str() for _ in range(n)]
                else:
                    fmt = TYPE_FMT[at]
                    size = struct.calcsize(fmt)
                    val = list(struct.unpack_from("<%d%s" % (n, fmt[1]), self.m, self.pos))
                    self.pos += n * size
                self.kv[key] = (t, val, at)
            else:
                self.kv[key] = (t, self._scalar(t), None)
        self.alignment = self.kv.get("general.alignment", (4, 32, None))[1]
        self.tensors = []  # (name, ne list, type, offset)
        for _ in range(n_tensors):
            name = self._str()
            nd = self._u32()
            ne = [self._u64() for _ in range(nd)]
            typ = self._u32()
            off = self._u64()
            self.tensors.append((name, ne, typ, off))
        a = self.alignment
        self.data_offset = (self.pos + a - 1) // a * a

    def _u32(self):
        v = struct.unpack_from("<I", self.m, self.pos)[0]
        self.pos += 4
        return v

    def _u64(self):
        v = struct.unpack_from("<Q", self.m, self.pos)[0]
        self.pos += 8
        return v

    def _str(self):
        n = self._u64()
        s = self.m[self.pos:self.pos + n].decode("utf-8")
        self.pos += n
        return s

    def _scalar(self, t):
        if t == 8:
            return self._str()
        fmt = TYPE_FMT[t]
        v = struct.unpack_from(fmt, self.m, self.pos)[0]
        self.pos += struct.calcsize(fmt)
        return v

    def value(self, key, default=None):
        return self.kv[key][1] if key in self.kv else default

    def tensor_bytes(self, name):
        for n, ne, typ, off in self.tensors:
            if n == name:
                bs, ts = GGML[typ]
                count = 1
                for d in ne:
                    count *= d
                nbytes = count // bs * ts
                start = self.data_offset + off
                return memoryview(self.m)[start:start + nbytes]
        raise KeyError(name)
