"""selfplay.collector: the collector paused around imports, then quieter, and never left off."""

import gc

import pytest

from selfplay.collector import collector_paused


def test_the_collector_is_paused_inside_and_as_it_was_after_whatever_the_block_raised():
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(ImportError), collector_paused():
        raise ImportError("a heavy import failed")
    assert gc.isenabled()  # a process that goes on (a test's, `cli.main`'s caller) collects
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()  # a caller's own choice is kept
    finally:
        gc.enable()


def test_the_tests_run_with_the_products_collector_after_their_paused_collection():
    # tests/conftest.py pauses it while the test modules import, then quiets it as `podracer
    # train` does: on, the imports frozen out of its passes, the young generation every 50,000.
    assert gc.isenabled()
    assert gc.get_threshold() == (50_000, 20, 100)
    assert gc.get_freeze_count() > 10_000
