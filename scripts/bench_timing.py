"""Timing shared by the Python baseline scripts (e2e_baselines.py, time_forest_python.py), so
their numbers are measured the same way as each other's."""
import statistics
import time


def timed(call, repeat):
    """The median wall time of `repeat` calls of call(), in ms, after one untimed warm-up call."""
    call()  # warm-up
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        call()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)
