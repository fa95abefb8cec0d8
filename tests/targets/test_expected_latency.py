"""Expected latency of a dynamic model from per-segment statistics, against hand computations."""

from __future__ import annotations

import pytest

from edgenlp.targets.costmodel import SegmentStats, expected_latency, segment_stats_from_profile

# three segments: ms per token 1, 2, 3; reached by every sentence, 60% and 25%, at falling token counts
RATE = (1.0, 2.0, 3.0)
STATS = [SegmentStats(1.0, 20.0, 28.0), SegmentStats(0.6, 14.0, 20.0), SegmentStats(0.25, 9.0)]


def cost(k: int, tokens: float) -> float:
    return RATE[k] * tokens + 0.5  # + a fixed 0.5 ms per call


def test_mean_p90_and_max_by_hand():
    # mean: 1.0*(20+0.5) + 0.6*(2*14+0.5) + 0.25*(3*9+0.5) = 20.5 + 17.1 + 6.875
    assert expected_latency(STATS, cost) == pytest.approx(44.475)
    # p90: the segments >= 10% of sentences reach (all three), at their p90 lengths (the last has none: its mean)
    assert expected_latency(STATS, cost, statistic="p90") == pytest.approx((28 + 0.5) + (40 + 0.5) + (27 + 0.5))
    # max: every segment at full length, whatever the exits do
    assert expected_latency(STATS, cost, statistic="max", full_tokens=32) == pytest.approx(32 + 64 + 96 + 1.5)
    rare = STATS[:2] + [SegmentStats(0.05, 9.0)]  # 5% reach the last segment: not the p90 sentence's, still in max
    assert expected_latency(rare, cost, statistic="p90") == pytest.approx(28.5 + 40.5)
    assert expected_latency(rare, cost, statistic="max", full_tokens=32) == pytest.approx(193.5)


def test_refusals_and_profile_stats():
    with pytest.raises(ValueError, match="full_tokens"):
        expected_latency(STATS, cost, statistic="max")
    with pytest.raises(ValueError, match="statistic"):
        expected_latency(STATS, cost, statistic="p99")
    with pytest.raises(ValueError, match="segment 1"):
        expected_latency([SegmentStats(0.5, 10), SegmentStats(0.7, 10)], cost)
    with pytest.raises(ValueError, match="reach"):
        SegmentStats(1.2, 10)
    section = {"runtimes": {"onnx": {"segments": [{"reach": 1.0, "mean_tokens": 20.0, "p90_tokens": 28.0},
                                                  {"reach": 0.6, "mean_tokens": 14.0, "p90_tokens": 20.0},
                                                  {"reach": 0.25, "mean_tokens": 9.0, "p90_tokens": None}]}}}
    assert segment_stats_from_profile(section) == STATS
