"""Kendall tau-b reference values from scipy.stats.kendalltau, for tests/nn/test_metrics.cpp.

Run: python3 tests/data/make_metrics_fixtures.py  (writes tests/data/metrics/kendall.npz, committed).
Each case i stores x_i, y_i and tau_i (NaN where scipy returns NaN)."""
import os

import numpy as np
import scipy
from scipy.stats import kendalltau

rng = np.random.default_rng(2023)
cases = [
    (rng.normal(size=50), rng.normal(size=50)),                       # no ties
    (rng.integers(0, 5, size=60).astype(float), rng.normal(size=60)),  # ties in x
    (rng.normal(size=60), rng.integers(0, 4, size=60).astype(float)),  # ties in y
    (rng.integers(0, 6, size=1000).astype(float), rng.integers(0, 7, size=1000).astype(float)),  # both
    (np.arange(30.0), np.arange(30.0)),                                # perfect
    (np.arange(30.0), -np.arange(30.0)),                               # reversed
    (np.ones(10), np.arange(10.0)),                                    # x all tied: NaN
    (np.array([1.0, 2.0]), np.array([2.0, 1.0])),                      # two items
]
x = rng.normal(size=5000)
cases.append((x, x + rng.normal(size=5000)))                           # large, correlated
out = {}
for i, (a, b) in enumerate(cases):
    out[f"x_{i}"] = a
    out[f"y_{i}"] = b
    out[f"tau_{i}"] = np.array(kendalltau(a, b).statistic if hasattr(kendalltau(a, b), "statistic") else kendalltau(a, b)[0])
out["scipy_version"] = np.array([int(v) for v in scipy.__version__.split(".")[:3]])
path = os.path.join(os.path.dirname(__file__), "metrics", "kendall.npz")
np.savez(path, **out)
print(path, {k: float(v) for k, v in out.items() if k.startswith("tau")})
