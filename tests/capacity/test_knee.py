"""The knee detector on synthetic step series."""

from console.features.capacity.knee import find_knee


def test_the_knee_is_the_first_step_where_p99_climbs_and_throughput_stalls():
    # 50 -> 100 -> 200 -> 400 clients: throughput doubles, then stalls at 400.
    series = [(100.0, 800.0), (198.0, 820.0), (390.0, 900.0), (410.0, 1900.0)]
    assert find_knee(series) == 3


def test_a_service_that_keeps_scaling_has_no_knee():
    assert find_knee([(100.0, 800.0), (200.0, 810.0), (400.0, 830.0), (800.0, 870.0)]) is None


def test_a_slower_step_that_still_buys_throughput_is_not_the_knee():
    # p99 doubles but throughput grew 50 %: the service still scales (partly).
    assert find_knee([(20.0, 100.0), (40.0, 100.0), (60.0, 200.0), (61.0, 300.0)]) == 3


def test_flat_throughput_with_a_steady_p99_is_not_a_knee():
    assert find_knee([(50.0, 500.0), (51.0, 520.0), (52.0, 540.0)]) is None


def test_steps_without_a_p99_are_skipped_and_one_step_has_no_knee():
    assert find_knee([(10.0, 100.0), (0.0, None), (10.5, 300.0)]) == 2
    assert find_knee([(10.0, 100.0)]) is None
    assert find_knee([]) is None


def test_the_thresholds_are_parameters():
    series = [(100.0, 100.0), (110.0, 140.0)]
    assert find_knee(series) == 1
    assert find_knee(series, p99_rise=0.5) is None
    assert find_knee(series, qps_growth=0.05) is None
