"""`Retry-After` as the errors read it (kubeapi.errors `retry_after_seconds`): capped, and what
is not delta-seconds is ignored, so no header can park an object until the controller restarts
(the review's misc01: `inf` and `1e309` did)."""

from __future__ import annotations

import pytest

from tests.kit import hostile
from vgpu_operator.core.backoff import Backoff
from vgpu_operator.kubeapi.errors import (
    RETRY_AFTER_CAP,
    ServerError,
    TooManyRequests,
    error_for,
    retry_after_seconds,
)


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        ("5", 5.0),
        (" 1 ", 1.0),
        ("0", 0.0),
        ("1.5", 1.5),
        ("86400", RETRY_AFTER_CAP),  # a day
        # misc01 (an HTTP-date: the caller's own backoff applies)
        *zip(
            hostile.RETRY_AFTER_HEADERS,
            [RETRY_AFTER_CAP, RETRY_AFTER_CAP, None, None, None],
            strict=True,
        ),
        ("", None),
    ],
)
def test_retry_after_is_capped_and_only_delta_seconds_count(
    header: str, seconds: float | None
) -> None:
    assert retry_after_seconds({"Retry-After": header}) == seconds
    for status in (429, 503):
        err = error_for(status, "slow down", headers={"retry-after": header})
        assert isinstance(err, TooManyRequests | ServerError)
        assert err.retry_after == seconds


def test_no_header_is_no_retry_after() -> None:
    assert retry_after_seconds({}) is None
    assert retry_after_seconds({"Content-Type": "application/json"}) is None


def test_the_cap_is_past_the_backoffs_own() -> None:
    assert Backoff().cap < RETRY_AFTER_CAP  # an honest long Retry-After still counts
