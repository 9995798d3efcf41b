"""KVSlotPool and ReqSlotTable: allocation, freeing, misuse detection."""
import pytest
import torch

from sglc_runtime.cache.kv_pool import KVPoolExhausted, KVSlotPool
from sglc_runtime.cache.req_slot_table import ReqSlotTable


def test_alloc_hands_out_distinct_free_slots():
    """alloc(n) returns n distinct in-range int64 slots and moves them from free to used."""
    pool = KVSlotPool(10, debug=True)
    a = pool.alloc(4)
    b = pool.alloc(6)
    assert a.dtype == torch.int64 and a.numel() == 4 and b.numel() == 6
    both = torch.cat([a, b])
    assert sorted(both.tolist()) == list(range(10))
    assert pool.num_free == 0 and pool.num_used == 10
    pool.check_integrity()


def test_can_alloc_answers_what_alloc_does():
    """can_alloc(n) is True exactly when alloc(n) succeeds; alloc(0) is always fine."""
    pool = KVSlotPool(3)
    assert pool.can_alloc(3) and not pool.can_alloc(4)
    assert pool.alloc(0).numel() == 0
    pool.alloc(2)
    assert pool.can_alloc(1) and not pool.can_alloc(2)
    with pytest.raises(KVPoolExhausted, match="only 1 of 3"):
        pool.alloc(2)


def test_free_returns_slots_for_reuse():
    """Freed slots are allocatable again and counts return to the start."""
    pool = KVSlotPool(5, debug=True)
    s = pool.alloc(5)
    pool.free(s[:2])
    assert pool.num_free == 2
    again = pool.alloc(2)
    assert set(again.tolist()) == set(s[:2].tolist())
    pool.free(torch.cat([again, s[2:]]))
    assert pool.num_free == 5
    pool.check_integrity()


def test_debug_free_detects_double_free():
    """With debug on, freeing a slot that is already free raises."""
    pool = KVSlotPool(4, debug=True)
    s = pool.alloc(2)
    pool.free(s)
    with pytest.raises(ValueError, match="double free"):
        pool.free(s[:1])


def test_debug_free_detects_foreign_and_repeated_slots():
    """With debug on, out-of-range slots and a slot repeated in one call are rejected."""
    pool = KVSlotPool(4, debug=True)
    pool.alloc(4)
    with pytest.raises(ValueError, match="out of range"):
        pool.free(torch.tensor([7]))
    with pytest.raises(ValueError, match="twice"):
        pool.free(torch.tensor([1, 1]))


def test_integrity_check_catches_unchecked_double_free():
    """Without debug the hot path skips checks, but check_integrity() finds a double free."""
    pool = KVSlotPool(4)
    s = pool.alloc(3)
    pool.free(s[:1])
    pool.free(s[:1])
    with pytest.raises(AssertionError, match="twice"):
        pool.check_integrity()


def test_free_overflowing_the_pool_raises_even_without_debug():
    """Freeing more slots than can be in use is always an error."""
    pool = KVSlotPool(2)
    s = pool.alloc(2)
    pool.free(s)
    with pytest.raises(RuntimeError, match="double free"):
        pool.free(s)


def test_table_rows_are_exclusive():
    """alloc_row never hands out a held row; freeing an unheld row raises."""
    t = ReqSlotTable(2, 8)
    r0, r1 = t.alloc_row(), t.alloc_row()
    assert r0 != r1 and not t.can_alloc_row()
    with pytest.raises(RuntimeError, match="all 2 rows"):
        t.alloc_row()
    t.free_row(r0)
    with pytest.raises(ValueError, match="not held"):
        t.free_row(r0)
    assert t.num_used_rows == 1 and t.num_free_rows == 1
    t.check_integrity()


def test_table_write_then_read_round_trips():
    """read(row, a, b) returns what write placed there; writing past max_context raises."""
    t = ReqSlotTable(1, 6)
    row = t.alloc_row()
    t.write(row, 0, torch.tensor([5, 6, 7]))
    t.write(row, 3, torch.tensor([9]))
    assert t.read(row, 0, 4).tolist() == [5, 6, 7, 9]
    with pytest.raises(ValueError, match="max_context"):
        t.write(row, 4, torch.tensor([1, 2, 3]))
