"""Writes the .npz/.npy fixtures in tests/data/npz with numpy and Python's zipfile, an implementation
independent of gnn's. Run from the repository root: python3 tests/data/make_fixtures.py

Every array holds value(i) at C-order flat index i (see tests/io/test_npz_fixtures.cpp):
  bool: i % 3 == 0;  unsigned: i % 250 (u8 also holds 2**63-1 at i == 1);  signed: i % 13 - 6;
  float: (i - 3) * 0.25
"""
import io
import os
import zipfile

import numpy as np

OUT = os.path.join(os.path.dirname(__file__), "npz")
DTYPES = ["b1", "u1", "i1", "i2", "i4", "i8", "u2", "u4", "u8", "f2", "f4", "f8"]


def values(dtype, shape):
    n = int(np.prod(shape))
    i = np.arange(n)
    kind = np.dtype(dtype).kind
    if kind == "b":
        v = i % 3 == 0
    elif kind == "u":
        v = i % 250
    elif kind == "i":
        v = i % 13 - 6
    else:
        v = (i - 3) * 0.25
    a = np.asarray(v).astype(dtype)
    if dtype.endswith("u8") and n > 1:
        a[1] = 2**63 - 1
    return a.reshape(shape)


def arrays(order="<"):
    out = {}
    for d in DTYPES:
        dt = d if d[0] in "bu" and d.endswith("1") else order + d
        out["a_" + d] = values(dt, (2, 3))
    out["scalar_f8"] = values(order + "f8", ())
    out["empty_f4"] = values(order + "f4", (0, 5))
    out["cube_i4"] = values(order + "i4", (2, 3, 4))
    out["six_dims_f4"] = values(order + "f4", (1, 2, 1, 3, 1, 2))
    return out


def main():
    os.makedirs(OUT, exist_ok=True)
    np.savez(os.path.join(OUT, "stored.npz"), **arrays())
    np.savez_compressed(os.path.join(OUT, "deflated.npz"), **arrays())
    np.savez(os.path.join(OUT, "bigendian.npz"), **arrays(">"))
    fortran = {k: np.asfortranarray(v) for k, v in arrays().items() if v.ndim >= 2}
    assert all(v.flags.f_contiguous for v in fortran.values())
    np.savez(os.path.join(OUT, "fortran.npz"), **fortran)

    for version in [(2, 0), (3, 0)]:
        with open(os.path.join(OUT, "v%d.npy" % version[0]), "wb") as f:
            np.lib.format.write_array(f, values("<f4", (3, 4)), version=version)
    np.save(os.path.join(OUT, "plain.npy"), values("<i8", (5,)))

    # ZIP64 central extras and end records, forced by lowering zipfile's limit.
    saved = zipfile.ZIP64_LIMIT
    zipfile.ZIP64_LIMIT = 64
    try:
        np.savez(os.path.join(OUT, "zip64.npz"), **arrays())
    finally:
        zipfile.ZIP64_LIMIT = saved

    # An archive comment after the end record.
    path = os.path.join(OUT, "comment.npz")
    np.savez(path, **arrays())
    with zipfile.ZipFile(path, "a") as z:
        z.comment = b"a comment that the end-of-central-directory search must skip"

    # Written to a non-seekable stream, zipfile sets bit 3 and puts CRC and sizes in data descriptors.
    class NoSeek(io.RawIOBase):
        def __init__(self):
            self.buf = io.BytesIO()

        def writable(self):
            return True

        def write(self, b):
            return self.buf.write(b)

        def seekable(self):
            return False

    sink = NoSeek()
    with zipfile.ZipFile(sink, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for k, v in arrays().items():
            with z.open(k + ".npy", "w") as m:
                np.lib.format.write_array(m, v)
    with open(os.path.join(OUT, "descriptor.npz"), "wb") as f:
        f.write(sink.buf.getvalue())


if __name__ == "__main__":
    main()
