"""The reused small device results of a forest's serving loop (canopy._arrays._OutputSlots): a
result is handed out again only when nothing but the slots refers to it. On the CPU with a
stand-in array module (numpy arrays, which the slots otherwise never keep); on the GPU with
cupy and torch through canopy.Forest itself."""
import threading

import numpy as np
import pytest
from sklearn.ensemble import RandomForestClassifier

import canopy
from canopy._arrays import _OutputSlots


class _Xp:  # an array module that is not numpy: the slots keep its arrays
    empty = staticmethod(np.empty)


def test_a_result_is_reused_only_when_nobody_holds_it():
    s = _OutputSlots()
    a = s.empty(_Xp, (100, 2), np.float64)
    b = s.empty(_Xp, (100, 2), np.float64)
    assert a is not b  # a is held
    addr = a.ctypes.data
    del a
    c = s.empty(_Xp, (100, 2), np.float64)
    assert c.ctypes.data == addr  # nobody held it: the same array again
    view = c[:, 1]
    del c
    d = s.empty(_Xp, (100, 2), np.float64)
    assert d.ctypes.data != addr and view.base is not None  # a view holds its array
    assert s.empty(_Xp, (100, 3), np.float64).shape == (100, 3)  # another shape: a new array
    assert s.empty(_Xp, (100, 2), np.float32).dtype == np.float32


def test_large_results_and_numpy_are_never_kept():
    s = _OutputSlots()
    big = (s.LARGEST // 8 + 1,)
    assert s.empty(_Xp, big, np.float64).shape == big and not s._slots
    assert s.empty(np, (10, 2), np.float64).shape == (10, 2) and not s._slots


def test_threads_never_share_a_result():
    s = _OutputSlots()
    bad = []

    def work(t):
        for i in range(2000):
            a = s.empty(_Xp, (64, 2), np.float64)
            a.fill(t * 10000 + i)
            if not (a == t * 10000 + i).all():
                bad.append((t, i))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad


def test_gpu_results_held_by_the_caller_are_never_overwritten():
    if not canopy.gpu_available():
        pytest.skip("no GPU: " + canopy.gpu_description())
    cp = pytest.importorskip("cupy")
    rng = np.random.default_rng(0)
    X = rng.random((2000, 5)).astype(np.float32)
    m = RandomForestClassifier(n_estimators=8, max_depth=8, random_state=0).fit(X, (X[:, 0] > X[:, 1]).astype(int))
    f = canopy.Forest.load(m)
    T1, T2 = rng.random((3000, 5)).astype(np.float32), rng.random((3000, 5)).astype(np.float32)
    w1, w2 = m.predict_proba(T1), m.predict_proba(T2)
    d1, d2 = cp.asarray(T1), cp.asarray(T2)
    kept = [f.predict_proba(d1)]
    col = f.predict_proba(d1)[:, 1]  # a view: its array stays the caller's
    for _ in range(5):
        got = f.predict_proba(d2)
        np.testing.assert_array_equal(cp.asnumpy(got), w2)
    np.testing.assert_array_equal(cp.asnumpy(kept[0]), w1)
    np.testing.assert_array_equal(cp.asnumpy(col), w1[:, 1])
    kept_now = {a.data.ptr for a in f._outs._slots}
    del got
    assert f.predict_proba(d1).data.ptr in kept_now  # released: a kept array is taken again
    try:
        import torch
    except ImportError:
        return
    t = f.predict_proba(torch.as_tensor(T1, device="cuda"))  # torch's tensor holds the array (DLPack)
    for _ in range(5):
        f.predict_proba(d2)
    np.testing.assert_array_equal(t.cpu().numpy(), w1)
