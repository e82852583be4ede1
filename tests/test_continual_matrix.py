"""The continual matrix's numbers on hand-built matrices whose ACC, BWT, FWT and forgetting are worked out
here by hand (GEM 2017; Chaudhry et al. 2018)."""

import pytest

from recall_cli.sequence.matrix import (average_accuracy, backward_transfer, forgetting, forward_transfer,
                                         summarize)

# Three tasks, a row 0 and every cell (a causal LM scores every task before it is trained).
FULL = [
    [0.50, 0.40, 0.30],  # the starting model
    [0.90, 0.45, 0.35],  # after stage 1
    [0.80, 0.85, 0.50],  # after stage 2
    [0.70, 0.75, 0.95],  # after stage 3
]
# A classifier sequence: no head before its stage, so no row 0 and nothing above the diagonal.
HEADS = [None, [0.90, None, None], [0.60, 0.80, None], [0.70, 0.50, 0.90]]


def test_full_matrix_by_hand():
    assert average_accuracy(FULL) == pytest.approx((0.70 + 0.75 + 0.95) / 3)
    # BWT: (R31 - R11 + R32 - R22) / 2 = (-0.20 - 0.10) / 2
    assert backward_transfer(FULL) == pytest.approx(-0.15)
    # FWT: (R12 - R02 + R23 - R03) / 2 = (0.05 + 0.20) / 2
    assert forward_transfer(FULL) == pytest.approx(0.125)
    # forgetting: task 1 max(0.90, 0.80) - 0.70; task 2 max(0.45, 0.85) - 0.75
    assert forgetting(FULL) == pytest.approx([0.20, 0.10])


def test_head_per_task_matrix():
    s = summarize(HEADS)
    assert s["acc"] == pytest.approx(0.70)
    assert s["bwt"] == pytest.approx(((0.70 - 0.90) + (0.50 - 0.80)) / 2)
    assert s["fwt"] is None  # no row 0: not defined, not 0
    # task 1 was best after stage 1 (0.90), not after stage 2 (0.60): forgetting reads the max, not the diagonal
    assert s["forgetting"] == pytest.approx([0.20, 0.30])
    assert s["forgetting_mean"] == pytest.approx(0.25)


def test_forgetting_reads_the_best_earlier_score_not_the_diagonal():
    m = [None, [0.5, None], [0.9, 0.7], [0.6, 0.6]][:3]  # two stages
    # task 1 improved after stage 2 (backward transfer > 0): no forgetting, negative
    assert backward_transfer(m) == pytest.approx(0.4)
    assert forgetting(m) == pytest.approx([0.5 - 0.9])


def test_one_stage_has_no_transfer():
    m = [None, [0.8]]
    assert average_accuracy(m) == pytest.approx(0.8)
    assert backward_transfer(m) is None and forward_transfer(m) is None and forgetting(m) == []
    with pytest.raises(ValueError):
        average_accuracy([None])
