"""Scratch arrays: reused per (purpose, shape, dtype), filled once when asked, never shared between threads."""

import threading

import numpy as np

from edgetorch.runtime.kernels.scratch import scratch


def test_same_request_returns_the_same_array_and_others_do_not():
    a = scratch("test.a", (3, 4), np.float32)
    assert scratch("test.a", (3, 4), np.float32) is a
    assert a.shape == (3, 4) and a.dtype == np.float32 and a.flags.c_contiguous
    assert scratch("test.b", (3, 4), np.float32) is not a
    assert scratch("test.a", (4, 3), np.float32) is not a
    assert scratch("test.a", (3, 4), np.float64) is not a


def test_fill_happens_once_so_untouched_cells_keep_it():
    box = scratch("test.box", (4, 4), np.float32, fill=-1.0)
    np.testing.assert_array_equal(box, -1.0)
    box[1:3, 1:3] = 7
    again = scratch("test.box", (4, 4), np.float32, fill=-1.0)
    assert again is box and again[0, 0] == -1 and again[1, 1] == 7


def test_threads_get_their_own_arrays():
    mine = scratch("test.thread", (2,), np.float32)
    theirs = []
    worker = threading.Thread(target=lambda: theirs.append(scratch("test.thread", (2,), np.float32)))
    worker.start()
    worker.join()
    assert theirs[0] is not mine
