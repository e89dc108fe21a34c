import pytest
from hypothesis import given
from hypothesis import strategies as st

from reinforce_ada.advantage import PoolStats
from reinforce_ada.uid import parse_uid, tag_uid

finite = st.floats(allow_nan=False, allow_infinity=False, width=64)


@given(st.text().filter(lambda s: "|ra:" not in s), st.integers(1, 10**6), finite, finite, finite)
def test_tag_round_trips_exactly(uid, count, mean, m2, weight):
    stats = PoolStats(count, mean, m2, weight)
    assert parse_uid(tag_uid(uid, stats)) == (uid, stats)


def test_untagged_uid_has_no_stats():
    assert parse_uid("abc") == ("abc", None)


@pytest.mark.parametrize("bad", ["u|ra:", "u|ra:3:0.5", "u|ra:x:1:1:1", "u|ra:0:1:1:1", "u|ra:1:1:1:1:1"])
def test_malformed_tag_raises(bad):
    with pytest.raises(ValueError, match="malformed"):
        parse_uid(bad)


def test_double_tagging_is_refused():
    with pytest.raises(ValueError, match="already"):
        tag_uid(tag_uid("u", PoolStats(1, 1.0, 0.0)), PoolStats(1, 1.0, 0.0))
