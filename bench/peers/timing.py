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


def cuda_median_ms(fn, repeat, warmup=3):
    """GPU work timed as gnn times it: CUDA events around each run on the current stream."""
    import torch
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    runs = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        runs.append(start.elapsed_time(end))
    return statistics.median(runs)
