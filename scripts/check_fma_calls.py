#!/usr/bin/env python3
"""No vectorised kernel calls glibc's fmaf: every call to it sits in a baseline (".default") clone.

kernels/vmath.h writes its multiply-adds as std::fma. Inside a GNN_CPU_CLONES function's AVX-512 and
AVX2 (x86-64-v3) clones that is one instruction; in code compiled for the x86-64 baseline it is a call
to glibc's fmaf for every multiply-add, and the loop around it no longer vectorises. So a per-element
chain that is not inlined into a clone (a template left out of line, a kernel with no cloned part)
silently runs as scalar calls on every machine. This lists the functions of the given static libraries
(objdump -dr) that reference fmaf and are not a ".default" clone, and fails when there is one.

  scripts/check_fma_calls.py build/lib/libgnn.a [more.a ...]
  scripts/check_fma_calls.py --self-test      (the parser finds a planted call)
"""
import re
import subprocess
import sys

SYMBOL = re.compile(r"^[0-9a-f]+ <(.+)>:$")
FMAF = re.compile(r"R_X86_64_\w+\s+fmaf\b|<fmaf@plt>")


def offenders(disassembly):
    """{function: references to fmaf} for the functions that are not a baseline clone."""
    found, current = {}, None
    for line in disassembly.splitlines():
        m = SYMBOL.match(line)
        if m:
            current = m.group(1)
        elif current and FMAF.search(line) and not current.endswith(".default"):
            found[current] = found.get(current, 0) + 1
    return found


def self_test():
    text = """0000000000000000 <_ZN3gnn4goodEv.default>:
   0:	call   5 <_ZN3gnn4goodEv.default+0x5>
			1: R_X86_64_PLT32	fmaf-0x4
0000000000000040 <_ZN3gnn3badEv.constprop.0>:
  40:	call   45 <_ZN3gnn3badEv.constprop.0+0x5>
			41: R_X86_64_PLT32	fmaf-0x4
0000000000000080 <_ZN3gnn4fineEv.arch_x86_64_v4>:
  80:	vfmadd132ps %zmm1,%zmm2,%zmm0
"""
    found = offenders(text)
    ok = found == {"_ZN3gnn3badEv.constprop.0": 1}
    print("check_fma_calls self-test:", "ok" if ok else f"FAILED, found {found}")
    return 0 if ok else 1


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    if len(argv) < 2 or any(a.startswith("-") for a in argv[1:]):  # (objdump would take an option, and pass)
        print(__doc__.strip().split("\n\n")[-1], file=sys.stderr)
        return 2
    bad = {}
    for lib in argv[1:]:
        out = subprocess.run(["objdump", "-dr", "--no-show-raw-insn", lib], capture_output=True, text=True)
        if out.returncode:
            why = (out.stderr.strip().splitlines() or [f"exit {out.returncode}"])[-1]
            print(f"check_fma_calls: {lib}: objdump failed: {why}", file=sys.stderr)
            return 2
        bad.update(offenders(out.stdout))
    syms = sorted(bad)  # (c++filt answers line for line, in the order asked)
    names = subprocess.run(["c++filt"], input="\n".join(syms), capture_output=True, text=True).stdout.split("\n")
    for sym, name in zip(syms, names):
        print(f"check_fma_calls: {name or sym} calls fmaf {bad[sym]} times outside a baseline clone")
    print(f"check_fma_calls: {len(bad)} function(s) call fmaf outside a baseline clone")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
