"""One key grammar (issue 28 §7), the same answer on every backend: keys and
stop keys at most 1,024 bytes, no NUL, not starting with '}'; labels without
NUL or 0x1F. A bad one is a ValueError before anything is sent; a bad stop
key is refused when the hold starts."""

from __future__ import annotations

import pytest

BAD_KEYS = ["", "a\x00b", "}x", "k" * 1025]


@pytest.mark.parametrize("bad", BAD_KEYS, ids=["empty", "nul", "brace", "long"])
def test_bad_keys_and_stop_keys_are_value_errors(backend, bad: str) -> None:  # type: ignore[no-untyped-def]
    a = backend.adapter()
    with pytest.raises(ValueError):
        a.acquire(bad, 5)
    with pytest.raises(ValueError):
        a.set_flag(bad, 5)
    with pytest.raises(ValueError):
        a.hold(bad, ttl=5, heartbeat=1)
    with pytest.raises(ValueError, match="stop_key"):
        a.hold("k", ttl=5, heartbeat=1, stop_key=bad)
    assert not a.held("k")


def test_good_keys_work_everywhere(backend) -> None:  # type: ignore[no-untyped-def]
    a = backend.adapter()
    for good in ["k" * 1024, "x}", "{a}b", "job 7: ü ✓"]:
        assert a.acquire(good, 5), good
        assert a.held(good)
        assert a.release(good)
    hold = a.hold("k", ttl=5, heartbeat=1, stop_key="x}")
    assert hold is not None and hold.release()
