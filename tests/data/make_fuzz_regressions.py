#!/usr/bin/env python3
"""Writes tests/data/fuzz_regressions/: one minimal input per class of bad file that gnn must refuse,
and expected.tsv, which names for each file a piece of the one-line error it must give when loaded as a
TpuGraphs graph (NpzReader + load_tpugraph, the path the fuzz targets take). Inputs the fuzzers find
are added beside them by hand, with their line in expected.tsv.

    python3 tests/data/make_fuzz_regressions.py   (needs numpy; the files are committed)
"""
import io
import os
import struct
import zipfile
import zlib

import numpy as np

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fuzz_regressions")


def npy(a):
    buf = io.BytesIO()
    np.save(buf, a)
    return buf.getvalue()


def tile_arrays(nodes=3, configs=2):
    return {
        "node_feat": np.zeros((nodes, 140), np.float32),
        "node_opcode": np.arange(nodes, dtype=np.uint8),
        "edge_index": np.array([[i, i - 1] for i in range(1, nodes)], np.int64).reshape(-1, 2),
        "config_feat": np.zeros((configs, 24), np.float32),
        "config_runtime": np.arange(1, configs + 1, dtype=np.int64) * 100,
        "config_runtime_normalizers": np.full(configs, 100, np.int64),
    }


def archive(members):
    """members: [(name, bytes)] stored, duplicates allowed (zipfile warns but writes them)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        for name, data in members:
            z.writestr(name, data)
    return buf.getvalue()


def npz(arrays, extra=()):
    return archive([(k + ".npy", npy(v)) for k, v in arrays.items()] + list(extra))


def write(name, data, message, cases):
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(data)
    cases.append((name, message))


def main():
    import warnings

    warnings.simplefilter("ignore")  # zipfile warns about the duplicate name, which is the point
    os.makedirs(OUT, exist_ok=True)
    cases = []
    good = tile_arrays()

    a = dict(good)
    write("duplicate_member.npz", npz(a, [("node_feat.npy", npy(np.ones((3, 140), np.float32)))]),
          "member 'node_feat.npy' appears twice", cases)
    write("array_twice.npz", npz(a, [("node_feat", npy(np.ones((3, 140), np.float32)))]),
          "two members are array 'node_feat'", cases)

    a = tile_arrays(nodes=0)
    a["edge_index"] = np.zeros((0, 2), np.int64)
    write("zero_nodes.npz", npz(a), "array 'node_feat': shape (0, 140) has no nodes", cases)

    a = dict(good, node_opcode=np.array([0, 121, 2], np.uint8))
    write("opcode_121.npz", npz(a), "node 1 has opcode 121, outside the HLO opcode ids [0, 121)", cases)

    a = dict(good, edge_index=np.array([[1, 0], [2, 7]], np.int64))
    write("edge_out_of_range.npz", npz(a), "array 'edge_index': edge 1 (2, 7) has a node id outside [0, 3)", cases)

    a = dict(good, config_runtime=np.array([100.0, np.nan]))
    write("nan_runtime.npz", npz(a), "array 'config_runtime': config 1 is nan", cases)

    a = dict(good)
    del a["config_feat"]
    write("not_tpugraphs.npz", npz(a), "not a TpuGraphs file", cases)

    data = bytearray(npz(good))
    at = data.index(b"\x93NUMPY") + 200  # inside node_feat's data
    data[at] ^= 0x01
    write("crc_mismatch.npz", bytes(data), "member 'node_feat.npy': CRC-32 mismatch", cases)

    data = npz(good)
    write("truncated.npz", data[: len(data) // 2], "not a ZIP archive, or truncated", cases)

    write("bad_npy_magic.npz", npz({k: v for k, v in good.items() if k != "node_feat"},
                                   [("node_feat.npy", b"not an array at all")]),
          "not an .npy array", cases)

    with open(os.path.join(OUT, "expected.tsv"), "w") as f:
        f.write("# file\tpart of the error it must give (tests/io/test_bad_input.cpp)\n")
        for name, message in cases:
            f.write(f"{name}\t{message}\n")
    print(f"wrote {len(cases)} inputs to {OUT}")


if __name__ == "__main__":
    main()
