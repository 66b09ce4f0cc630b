"""Holder inspection from Python: the default identity names Python, and
info() carries the lease's fence."""
import os
import socket

import mistri_locks


def test_info_names_python_and_the_fence(tmp_path):
    locks = mistri_locks.Local(tmp_path / "locks.db")
    assert locks.info("job") is None
    hold = locks.hold("job", ttl=5, heartbeat=0.5)
    assert hold is not None
    info = locks.info("job")
    assert info is not None
    assert info["holder"] == f"{socket.gethostname()}:{os.getpid()} python"
    assert info["fence"] == hold.fence
    assert info["ttl"] == 5 and info["heartbeat"] == 0.5
    assert 0 < info["time_left"] <= 5
    assert info["renewed_at"] >= info["acquired_at"]
    hold.release()
    assert locks.info("job") is None


def test_info_on_memory():
    locks = mistri_locks.Memory()
    assert locks.acquire("k", ttl=2)
    info = locks.info("k")
    assert info is not None and info["fence"] == locks.fence("k")


def test_labels_per_adapter_and_per_hold(tmp_path):
    locks = mistri_locks.Local(tmp_path / "locks.db", label="nightly worker")
    assert locks.label == "nightly worker"
    assert locks.acquire("plain", ttl=5)
    assert locks.info("plain")["holder"] == "nightly worker"
    hold = locks.hold("job", ttl=5, heartbeat=0.5, label="report 7")
    assert hold is not None
    assert locks.info("job")["holder"] == "report 7"
    hold.release()
    locks.label = None  # back to the default
    assert locks.label == f"{socket.gethostname()}:{os.getpid()} python"
    other = mistri_locks.Memory(label="mem")
    assert other.acquire("k", ttl=2) and other.info("k")["holder"] == "mem"


def test_bad_labels_are_clear_errors():
    import pytest

    locks = mistri_locks.Memory()
    with pytest.raises(ValueError, match="label"):
        mistri_locks.Memory(label="")
    with pytest.raises(ValueError, match="label"):
        locks.label = ""
    with pytest.raises(TypeError):
        locks.label = 7  # type: ignore[assignment]
    with pytest.raises(ValueError, match="label"):
        locks.hold("job", ttl=1, heartbeat=0.1, label="")
    assert not locks.held("job")
