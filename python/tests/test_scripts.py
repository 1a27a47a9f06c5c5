"""The user scripts that numpy runs (scripts/split_configs.py): what they write, and what they refuse."""
import pathlib
import subprocess
import sys

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
SPLIT = str(ROOT / "scripts" / "split_configs.py")


def layout_file(path, configs, seed=0):
    """A layout program's config arrays: node_config_feat [C, 3, 18] and config_runtime [C]."""
    rng = np.random.default_rng(seed)
    np.savez(path, node_config_feat=rng.random((configs, 3, 18), np.float32),
             config_runtime=rng.integers(1, 1000, configs).astype(np.int64), node_feat=np.ones((5, 140), np.float32))


def test_split_configs_holds_out_configs_in_both_valid_and_test(tmp_path):
    layout_file(tmp_path / "p.npz", 20)
    r = subprocess.run([sys.executable, SPLIT, str(tmp_path / "out"), str(tmp_path / "p.npz"), "--holdout", "0.25"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    root = tmp_path / "out" / "npz" / "layout" / "xla" / "default"
    train, valid, test = (np.load(root / s / "p.npz") for s in ("train", "valid", "test"))
    assert len(train["config_runtime"]) == 15 and len(valid["config_runtime"]) == 5
    assert np.array_equal(valid["config_runtime"], test["config_runtime"])
    # The held-out configs: the first 5 of --seed 0's permutation, in order (the splits the docs' tables used).
    held = np.sort(np.random.default_rng(0).permutation(20)[:5])
    with np.load(tmp_path / "p.npz") as whole:
        assert np.array_equal(valid["config_runtime"], whole["config_runtime"][held])
        assert np.array_equal(valid["node_config_feat"], whole["node_config_feat"][held])
    assert np.array_equal(train["node_feat"], np.ones((5, 140), np.float32))  # (the rest copied unchanged)


def test_split_configs_writes_nothing_when_a_file_is_bad_or_every_file_skipped(tmp_path):
    layout_file(tmp_path / "p.npz", 20)
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, SPLIT, str(out), str(tmp_path / "p.npz"), str(tmp_path / "bad.npz")],
                       capture_output=True, text=True)
    assert r.returncode == 1 and "bad.npz: cannot be read as npz" in r.stderr and "Traceback" not in r.stderr
    assert not out.exists()  # p.npz, read first, was not written either
    r = subprocess.run([sys.executable, SPLIT, str(out), str(tmp_path / "p.npz"), "--holdout", "0.95"],
                       capture_output=True, text=True)
    assert r.returncode == 1 and "every file was skipped at --holdout 0.95: nothing written" in r.stderr
    assert not out.exists()


def test_split_configs_refuses_config_arrays_of_other_lengths(tmp_path):
    """A runtime array shorter or longer than node_config_feat: refused before anything is written (a
    shorter one was split into a tree the engine accepts, the configs past it dropped unsaid)."""
    layout_file(tmp_path / "p.npz", 20)
    for name, runtimes in (("short", 17), ("long", 25), ("scalar", None)):
        with np.load(tmp_path / "p.npz") as z:
            arrays = {k: z[k] for k in z.files}
        arrays["config_runtime"] = np.int64(5) if runtimes is None else np.arange(1, runtimes + 1, dtype=np.int64)
        np.savez(tmp_path / f"{name}.npz", **arrays)
        out = tmp_path / f"out_{name}"
        r = subprocess.run([sys.executable, SPLIT, str(out), str(tmp_path / "p.npz"), str(tmp_path / f"{name}.npz")],
                           capture_output=True, text=True)
        assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
        if runtimes is None:
            assert f"{name}.npz: config_runtime has shape (), not [configs]" in r.stderr
        else:
            assert (f"{name}.npz: node_config_feat has shape (20, 3, 18), and config_runtime lists {runtimes} configs"
                    in r.stderr), r.stderr
        assert not out.exists()  # p.npz, sound and read first, was not written either
