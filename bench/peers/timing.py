"""The timing rule every peer script uses: warm-up runs, then the median of repeated runs, in ms."""
import statistics
import time


def median_ms(fn, repeat, warmup=3):
    for _ in range(warmup):
        fn()
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        runs.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(runs)
