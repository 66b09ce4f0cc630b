"""The job face over the core kit (issue 40): the job stop key, stop_job and
stop_holders are the core's (``job::stop_key``, ``Locks::stop_job``,
``Locks::stop_holders``) on every backend; ``Hold.checkpoint`` raises the
native module's ``Interrupted`` from the core's typed interruption, never
importing the pure-Python package to do it."""

from __future__ import annotations

import math
import pathlib
import subprocess
import sys
import time

import pytest

import mistri_locks
from mistri_locks import _native
from mistri_locks.integrations.celery import stop_key as celery_stop_key


def wait_for(cond, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            pytest.fail(f"timed out: {what}")
        time.sleep(0.02)


def test_job_stop_key_is_the_cores() -> None:
    assert mistri_locks.job_stop_key("abc") == "job:abc:stop"
    assert celery_stop_key("abc") == "job:abc:stop"
    with pytest.raises(ValueError, match="job id must not be empty"):
        mistri_locks.job_stop_key("")
    with pytest.raises(TypeError, match="job id must be a str"):
        mistri_locks.job_stop_key(7)  # type: ignore[arg-type]


def test_no_stop_key_format_in_the_python_package() -> None:
    package = pathlib.Path(mistri_locks.__file__).parent
    hits = [str(p) for p in package.rglob("*.py") if "job:" in p.read_text()]
    assert hits == []


def test_stop_job_raises_the_flag(backend) -> None:  # type: ignore[no-untyped-def]
    locks = backend.adapter()
    assert locks.stop_job("abc", 5) == "job:abc:stop"
    assert backend.owner().flag("job:abc:stop"), "another owner sees it"
    with pytest.raises(ValueError):
        locks.stop_job("", 5)


def test_stop_holders_raises_each_holders_stop_key_once(backend) -> None:  # type: ignore[no-untyped-def]
    locks = backend.adapter()
    other = backend.owner()
    assert locks.stop_holders("report") == [], "nobody holds it"
    plain = locks.hold("plain", ttl=5, heartbeat=1)
    assert plain is not None
    assert locks.stop_holders("plain") == [], "a plain lease can only be broken"
    a = locks.hold("report", ttl=5, heartbeat=1, limit=3, stop_key="stop:a")
    b = other.hold("report", ttl=5, heartbeat=1, limit=3, stop_key="stop:b")
    c = locks.hold("report", ttl=5, heartbeat=1, limit=3, stop_key="stop:a")
    assert a is not None and b is not None and c is not None
    assert sorted(backend.owner().stop_holders("report", 5)) == ["stop:a", "stop:b"]
    assert other.flag("stop:a") and other.flag("stop:b")
    for h in (plain, a, b, c):
        h.release()
    with pytest.raises(ValueError):
        locks.stop_holders("report", -1)


def test_checkpoint_raises_native_interrupted_stopped_then_lost(backend) -> None:  # type: ignore[no-untyped-def]
    locks = backend.adapter()
    assert mistri_locks.Interrupted is _native.Interrupted
    assert issubclass(_native.Interrupted, mistri_locks.Error)
    hold = locks.hold("work", ttl=1, heartbeat=0.1, stop_key="stop:work")
    assert hold is not None
    hold.checkpoint()
    backend.owner().set_flag("stop:work", 5)
    wait_for(lambda: hold.signal.aborted, 5, "the stop flag seen within a tick")
    with pytest.raises(mistri_locks.Interrupted) as stopped:
        hold.checkpoint()
    e = stopped.value
    assert (e.reason, e.key, e.flag, e.cause) == ("stopped", "work", "stop:work", None)
    assert "was asked to stop" in str(e)
    hold.release()

    lost = locks.hold("gone", ttl=1, heartbeat=0.1)
    assert lost is not None
    backend.delete_lease("gone")
    wait_for(lambda: lost.signal.aborted, 5, "the loss seen at the next renewal")
    with pytest.raises(mistri_locks.Interrupted) as gone:
        lost.checkpoint()
    e = gone.value
    assert (e.reason, e.key, e.flag, e.cause) == ("lost", "gone", None, "not_held")
    assert "was lost" in str(e)


def test_checkpoint_does_not_import_the_package() -> None:
    # With the pure-Python package's module made unimportable,
    # Hold.checkpoint still raises the native module's Interrupted (the old
    # checkpoint imported mistri_locks._leased.Interrupted here).
    code = """
import sys
import mistri_locks
from mistri_locks import _native as native
sys.modules["mistri_locks._leased"] = None
locks = native.Memory()
signal = native.AbortSignal()
h = locks.hold("k", ttl=5, heartbeat=1, signal=signal)
signal.abort("enough")
try:
    h.checkpoint()
except native.Interrupted as e:
    assert (e.reason, e.flag, e.detail) == ("stopped", None, "enough"), (e.reason, e.flag, e.detail)
else:
    raise SystemExit("no Interrupted")
h.release()
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_hold_options_are_read_by_name_by_the_core() -> None:
    # hold()'s keywords go to the core's HoldOptions::set by name, straight
    # from Rust (no trip through the Python _hold): an unknown one is still
    # Python's TypeError, now naming the nearest of the core's names.
    locks = mistri_locks.Memory()
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'hearbeat'; did you mean \"heartbeat\"\?"):
        locks.hold("k", ttl=5, hearbeat=1)
    with pytest.raises(TypeError, match=r"'stopkey'; did you mean \"stop_key\"\?"):
        mistri_locks.hold("k", stopkey="s")
    with pytest.raises(TypeError, match="multiple values for argument 'ttl'"):
        locks.hold("k", 5, ttl=5)
    with pytest.raises(TypeError, match="limit must be an integer"):
        locks.hold("k", limit=1.5)
    with pytest.raises(TypeError, match="label must be text"):
        locks.hold("k", label=7)
    with pytest.raises(ValueError, match="limit"):
        locks.hold("k", limit=0)
    assert not locks.held("k"), "a refused call took nothing"
    h = locks.hold("k", 5, 0.5, "stop:k", label="worker", limit=2)
    assert h is not None
    info = locks.info("k")
    assert info is not None
    holder = info["holders"][0]
    assert (holder["stop_key"], holder["holder"], holder["heartbeat"], info["limit"]) == (
        "stop:k", "worker", 0.5, 2)
    h.release()


def test_lease_spec_numbers_are_the_cores_job_options() -> None:
    # LeaseSpec (leased, Celery, Dramatiq) keeps the templates, locks= and
    # callables; ttl, heartbeat, limit and wait are checked, with their
    # defaults, by the core's JobOptions, in its words.
    assert _native._job_options(ttl=30)["heartbeat"] == 10.0  # min(HEARTBEAT, ttl / 3)
    assert _native._job_options(wait=math.inf)["wait"] == math.inf
    with pytest.raises(TypeError, match=r"unknown job option 'tll'; did you mean \"ttl\"\?"):
        _native._job_options(tll=3)
    with pytest.raises(ValueError, match=r"leased: ttl must be a finite number of seconds > 0, got 0"):
        mistri_locks.leased("k", ttl=0)(lambda: None)
    with pytest.raises(TypeError, match=r"leased: ttl must be a number of seconds"):
        mistri_locks.leased("k", ttl="60")(lambda: None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"leased: limit must be an integer >= 1, got 0"):
        mistri_locks.leased("k", limit=0)(lambda: None)


def test_a_wrong_kind_option_is_a_type_error_by_the_cores_kind() -> None:
    # The core says "wrong kind" with its own error kind (WrongType), not
    # in words the face reads: every option setter's wrong kind is a
    # TypeError, a value of the right kind out of range a ValueError.
    locks = mistri_locks.Memory()
    native = mistri_locks._native
    with pytest.raises(TypeError, match="ttl must be a number of seconds"):
        locks.hold("k", ttl="5")
    with pytest.raises(ValueError, match="ttl"):
        locks.hold("k", ttl=-1)
    with pytest.raises(TypeError, match=r"on_conflict must be \"retry\""):
        native._job_options(on_conflict=1)
    with pytest.raises(ValueError, match="on_conflict"):
        native._job_options(on_conflict="later")
    with pytest.raises(TypeError, match="allow_actions must be true or false"):
        native._operator_options({"allow_actions": "yes"})
    with pytest.raises(TypeError, match="port must be a number"):
        native.postgres_url(host="h", port=5432.5)
    with pytest.raises(ValueError, match="port must be a number"):
        native.postgres_url(host="h", port=70_000)
    assert not locks.held("k")
