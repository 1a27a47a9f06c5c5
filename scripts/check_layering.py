#!/usr/bin/env python3
"""Checks every project include against the layering of docs/design.md and exits 1 on a new breach.

    python3 scripts/check_layering.py [REPO]      (ctest runs it as "layering: ...")
    python3 scripts/check_layering.py --self-test (a planted breach in a temporary tree must fail)

A folder may include itself and what its arrows reach (docs/design.md, "Layers"):
    apps -> nn -> autograd -> runtime, kernels;  apps -> io -> runtime;  apps -> dist -> runtime
    apps -> bench (the kernel registry `gnn bench kernel` times) -> the library (not apps)
    runtime, kernels -> base;  fuzz -> io, runtime, and apps (the checkpoint reader builds models);
    python (the nanobind module) -> runtime, kernels, io;
    tests -> anything
base (errors, the stream type, the CUDA check) includes nothing of the project; every folder may
include it. kernels and io know nothing of each other or of anything above them; runtime includes
nothing above it; autograd/dispatch.h is autograd's own (its ops and their tests).

KNOWN lists tolerated breaches, each with the reason it is still there; issue 24 removed the last
of them. A breach not in KNOWN fails, and so does an entry of KNOWN that no longer occurs: the list
only shrinks.
"""
import re
import sys
from pathlib import Path

ALLOWED = {
    "apps": {"apps", "nn", "autograd", "runtime", "kernels", "io", "dist", "bench"},
    "dist": {"dist", "runtime"},
    "nn": {"nn", "autograd", "runtime", "kernels"},
    "autograd": {"autograd", "runtime", "kernels"},
    "runtime": {"runtime"},
    "kernels": {"kernels"},
    "io": {"io", "runtime"},
    "bench": {"bench", "nn", "autograd", "runtime", "kernels", "io"},
    "fuzz": {"fuzz", "io", "runtime", "apps", "nn"},
    "emu": {"emu"},
    "python": {"python", "runtime", "kernels", "io"},  # the nanobind module: the raw kernels, graphs, files
}
for _folder in ALLOWED:
    ALLOWED[_folder].add("base")  # errors, the stream type and the CUDA check: below everything
ALLOWED["base"] = {"base"}
PRIVATE = {"autograd/dispatch.h": {"autograd", "tests"}}  # header -> the folders that may include it

KNOWN = {}  # (file, include) -> why it is still there; empty since issue 24

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
SOURCES = (".h", ".cpp", ".cu", ".cuh")


def check(root):
    """The breaches under root, one line each."""
    seen, breaches = set(), []
    for folder in ALLOWED.keys() | {"tests"}:
        for path in sorted((root / folder).rglob("*")):
            if path.suffix not in SOURCES or not path.is_file():
                continue
            rel = path.relative_to(root).as_posix()
            for target in INCLUDE.findall(path.read_text(errors="replace")):
                top = target.split("/", 1)[0]
                if "/" not in target or not (root / top).is_dir():
                    continue  # a system header, or one relative to the file's own folder
                ok = folder == "tests" or top in ALLOWED[folder]
                ok = ok and (target not in PRIVATE or folder in PRIVATE[target])
                if ok:
                    continue
                if (rel, target) in KNOWN:
                    seen.add((rel, target))
                else:
                    breaches.append(f"{rel}: includes {target}, but {folder}/ may include "
                                    f"{', '.join(sorted(ALLOWED[folder]))} only (docs/design.md, Layers)")
    gone = sorted(set(KNOWN) - seen)
    for rel, target in gone:
        breaches.append(f"{rel} no longer includes {target}: remove it from KNOWN in scripts/check_layering.py")
    return breaches, len(seen)


def self_test():
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        for folder in ALLOWED:
            (root / folder).mkdir()
        (root / "nn" / "layer.h").write_text("#pragma once\n")
        (root / "runtime" / "tensor.h").write_text('#include "nn/layer.h"\n#include <vector>\n')
        (root / "io" / "npz.cpp").write_text('#include "runtime/tensor.h"\n')
        breaches, _ = check(root)
        planted = [b for b in breaches if b.startswith("runtime/tensor.h: includes nn/layer.h")]
        stale = [b for b in breaches if "no longer includes" in b]
        allowed = [b for b in breaches if b.startswith("io/npz.cpp")]
        ok = len(planted) == 1 and len(stale) == len(KNOWN) and not allowed
        print("layering self-test:", "ok" if ok else "FAILED", f"({len(breaches)} lines)")
        return 0 if ok else 1


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    if len(sys.argv) > 2 or (len(sys.argv) == 2 and sys.argv[1].startswith("-")):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent)
    if not all((root / folder).is_dir() for folder in ALLOWED):  # (no folders: nothing checked, and a pass)
        print(f"check_layering.py: {root} is not the repository: it lacks the layer folders "
              f"{', '.join(sorted(f for f in ALLOWED if not (root / f).is_dir()))}", file=sys.stderr)
        return 2
    breaches, known = check(root)
    for b in breaches:
        print(b)
    print(f"layering: {len(breaches)} breach(es); {known} known include(s) still to remove")
    return 1 if breaches else 0


if __name__ == "__main__":
    sys.exit(main())
