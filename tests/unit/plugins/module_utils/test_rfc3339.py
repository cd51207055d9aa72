"""The one RFC 3339 parser: the API server's, the Python client's and Alertmanager's spellings."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.gpufleet.resilience.plugins.module_utils.rfc3339 import epoch_seconds, parse

MOMENT = datetime(2026, 12, 6, 2, 30, tzinfo=timezone.utc)


@pytest.mark.parametrize("text", [
    "2026-12-06T02:30:00Z",  # the API server
    "2026-12-06T02:30:00+00:00",  # the Python client's serialization
    "2026-12-06T03:30:00+01:00",
    "2026-12-06T02:30:00.000000000Z",  # Alertmanager: nine fraction digits
    "2026-12-06T02:30:00",  # naive: UTC
    " 2026-12-06T02:30:00Z ",
    MOMENT,
    MOMENT.replace(tzinfo=None),
])
def test_every_spelling_is_the_same_moment(text):
    assert parse(text) == MOMENT
    assert epoch_seconds(text) == MOMENT.timestamp()


def test_the_fraction_is_kept_to_the_microsecond():
    assert epoch_seconds("2026-12-06T02:30:00.123456789Z") == pytest.approx(MOMENT.timestamp() + 0.123456)
    assert epoch_seconds("2026-12-06T02:30:00.5-01:00") == MOMENT.timestamp() + 3600.5


@pytest.mark.parametrize("text", [None, "", "not a time", "2026-13-01T00:00:00Z", "1795900000",
                                  "0001-01-01T00:00:00+99:00"])
def test_absent_or_unreadable_is_none(text):
    assert parse(text) is None and epoch_seconds(text) is None


@given(st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(2200, 1, 1)),
       st.integers(min_value=-14 * 60, max_value=14 * 60))
def test_what_isoformat_writes_reads_back(moment, offset_minutes):
    aware = moment.replace(tzinfo=timezone(timedelta(minutes=offset_minutes)))
    assert parse(aware.isoformat()) == aware
    assert parse(aware.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")) == aware
