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
