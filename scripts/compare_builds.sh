#!/usr/bin/env bash
# Trains every recipe briefly with two gnn binaries (two commits of a refactor) and compares their
# checkpoints array by array: the refactor changed nothing a run computes when every recipe's weights,
# optimiser state and RNG state are the same bits. Only state/seconds (wall time) may differ.
#
#   scripts/compare_builds.sh OLD_GNN NEW_GNN [EPOCHS=3] [RECIPE ...]   (default: every recipe)
#
# A RECIPE may carry flags, given to both runs after the common ones: "layout-resmodel --share off".
#
# Both binaries train on one small generated dataset (layout and tile, 2 threads), the same seed and
# flags. Prints one line per recipe (same bits / the arrays that differ and by how much, relative) and
# exits 1 when any differs. Needs Python with NumPy (${PYTHON:-python3}).
set -euo pipefail
if [ $# -lt 2 ]; then
  sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
for b in "$1" "$2"; do  # (checked as given: realpath of a missing folder prints its own error and nothing)
  [ -f "$b" ] && [ -x "$b" ] || { echo "compare_builds: '$b' is not an executable" >&2; exit 2; }
done
old=$(realpath "$1") new=$(realpath "$2")
epochs=${3:-3}
shift $(($# < 3 ? $# : 3))
py=${PYTHON:-python3}
if ! [[ $epochs =~ ^[1-9][0-9]*$ ]]; then
  echo "compare_builds: EPOCHS must be a whole number >= 1, got '$epochs'" >&2
  exit 2
fi
"$py" -c 'import numpy' 2>/dev/null || { echo "compare_builds: $py has no NumPy (set PYTHON)" >&2; exit 2; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$new" synth --collection layout --out "$work/data" --graphs 4 --nodes 200 --configs 40 --seed 3 \
  --split train,valid >/dev/null
"$new" synth --collection tile --out "$work/data" --graphs 6 --nodes 40 --configs 30 --seed 3 \
  --split train,valid >/dev/null
recipes=("$@")
# (every recipe the old binary has: one added since has nothing to compare with)
if [ ${#recipes[@]} -eq 0 ]; then
  listed=$("$old" models) || { echo "compare_builds: $old models failed" >&2; exit 2; }
  mapfile -t recipes < <(awk '/^(tile|layout|dnnperf)-/ {print $1}' <<<"$listed")
  # (an empty list would read as "no differences")
  [ ${#recipes[@]} -gt 0 ] || { echo "compare_builds: $old models lists no recipes" >&2; exit 2; }
fi

differ=0
for r in "${recipes[@]}"; do
  read -r name flags <<<"$r"
  run=$(echo "$r" | tr -c 'a-zA-Z0-9.-' '_')
  for side in old new; do
    bin=$old
    [ $side = new ] && bin=$new
    # shellcheck disable=SC2086  # (the recipe's flags, split on purpose)
    if ! "$bin" train --model "$name" --data "$work/data" --out "$work/$run.$side" --epochs "$epochs" --seed 7 \
      --threads 2 --progress lines $flags >"$work/$run.$side.log" 2>&1; then
      echo "$r: the $side binary failed:" && tail -3 "$work/$run.$side.log"
      differ=1
      continue 2
    fi
  done
  if ! "$py" - "$work/$run.old/model.npz" "$work/$run.new/model.npz" "$r" <<'EOF'; then differ=1; fi
import sys
import numpy as np
a, b, name = np.load(sys.argv[1]), np.load(sys.argv[2]), sys.argv[3]
keys = sorted((set(a.files) | set(b.files)) - {"state/seconds"})
bad = []
for k in keys:
    if k not in a.files or k not in b.files:
        bad.append(f"{k} only in {'new' if k not in a.files else 'old'}")
        continue
    x, y = a[k], b[k]
    if x.shape != y.shape or x.dtype != y.dtype:
        bad.append(f"{k} {x.dtype}{x.shape} vs {y.dtype}{y.shape}")
    elif x.tobytes() != y.tobytes():
        if x.dtype.kind == "f":
            rel = np.max(np.abs(x - y)) / max(np.max(np.abs(x)), 1e-30)
            bad.append(f"{k} max relative difference {rel:.3g}")
        else:
            bad.append(f"{k} differs")
if bad:
    print(f"{name}: {len(bad)} of {len(keys)} arrays differ: " + "; ".join(bad[:5]))
    sys.exit(1)
print(f"{name}: same bits ({len(keys)} arrays)")
EOF
done
exit $differ
