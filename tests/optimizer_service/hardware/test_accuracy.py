"""Accuracy metrics of the simulator against measurements (pure)."""

import pytest

from optimizer_service.hardware.accuracy import Candidate, evaluate, in_top, ranks, spearman


def test_ranks_average_ties_and_spearman_matches_hand_values():
    assert ranks([3.0, 1.0, 3.0, 2.0]).tolist() == [3.5, 1.0, 3.5, 2.0]
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 2, 3], [5, 5, 5]) == 0.0


def test_top_k_includes_ties_at_the_cutoff():
    assert in_top([2.0, 1.0, 1.0, 3.0], 1).tolist() == [False, True, True, False]
    assert in_top([2.0, 1.0], 5).tolist() == [True, True]


def test_evaluate_scores_per_placement():
    candidates = [
        # placement 0: the simulator's favourite (0.5) is measured fastest
        Candidate(0, 1.0, 1.1), Candidate(0, 0.5, 0.55), Candidate(0, 0.7, 0.9),
        # placement 1: simulator prefers 0.2, but 0.3 is measured 1 % faster (within tolerance)
        Candidate(1, 0.2, 0.404), Candidate(1, 0.3, 0.40), Candidate(1, 0.9, 1.0),
    ]
    acc = evaluate(candidates, tolerance=0.05)
    assert acc.top1 == 0.5 and acc.top1_tolerant == 1.0
    assert acc.top5 == 1.0
    assert acc.candidates == 6 and acc.placements == 2
    expected_mape = sum(abs(c.predicted_seconds - c.measured_seconds) / c.measured_seconds
                        for c in candidates) / 6
    assert acc.mape == pytest.approx(expected_mape)
    assert 0 < acc.spearman <= 1
    assert set(acc.to_dict()) >= {"mape", "spearman", "top1", "top5", "candidates"}


def test_evaluate_with_nothing_measured():
    assert evaluate([]).candidates == 0
