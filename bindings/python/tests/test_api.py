"""Module-level surface: configure/locks/hold, constants, errors."""

from __future__ import annotations

import builtins
import time

import pytest

import mistri_locks
from conftest import free_port


def test_constants() -> None:
    assert mistri_locks.LEASE_TTL == 180
    assert mistri_locks.HEARTBEAT == 60
    assert mistri_locks.FLAG_TTL == 300


def test_hold_without_configuration_is_none_but_still_validates() -> None:
    assert mistri_locks.locks() is None
    assert mistri_locks.hold("k") is None
    with pytest.raises(ValueError, match="key"):
        mistri_locks.hold("")
    with pytest.raises(ValueError, match="ttl"):
        mistri_locks.hold("k", ttl=0)
    with pytest.raises(TypeError):
        mistri_locks.hold("k", ttl=True)


def test_configure_and_hold(backend) -> None:
    adapter = backend.adapter()
    assert mistri_locks.configure(adapter) is None
    assert mistri_locks.locks() is adapter
    with mistri_locks.hold("configured", ttl=5, heartbeat=1) as h:  # type: ignore[union-attr]
        assert isinstance(h, mistri_locks.Hold)
        assert h.key == "configured"
        assert adapter.held("configured")
        assert mistri_locks.hold("configured") is None, "held elsewhere"
        assert isinstance(h.signal, mistri_locks.AbortSignal)
        assert "configured" in repr(h)
    assert not adapter.held("configured")
    mistri_locks.configure(None)
    assert mistri_locks.locks() is None
    assert mistri_locks.hold("configured") is None


def test_configure_refuses_non_adapters() -> None:
    with pytest.raises(TypeError):
        mistri_locks.configure("redis://localhost")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        mistri_locks.Locks()  # type: ignore[call-arg]
    assert mistri_locks.locks() is None


def test_adapters_are_adapters() -> None:
    assert isinstance(mistri_locks.Memory(), mistri_locks.Locks)
    r = mistri_locks.Redis()
    assert isinstance(r, mistri_locks.Locks)
    assert r.namespace == "mistri:locks"
    assert "mistri:locks" in repr(r)


def test_exception_hierarchy() -> None:
    for cls in (
        mistri_locks.ConfigError,
        mistri_locks.ConnectionError,
        mistri_locks.BackendError,
        mistri_locks.SystemResourceError,
    ):
        assert issubclass(cls, mistri_locks.Error)
        assert cls.__module__ == "mistri_locks"
    assert issubclass(mistri_locks.Error, Exception)
    assert issubclass(mistri_locks.ConnectionError, builtins.ConnectionError)
    assert issubclass(mistri_locks.SystemResourceError, OSError)


def test_bad_redis_configuration() -> None:
    with pytest.raises(mistri_locks.ConfigError, match="URL"):
        mistri_locks.Redis("not a url")
    with pytest.raises(mistri_locks.ConfigError):
        mistri_locks.Redis("http://127.0.0.1:6379/0")
    with pytest.raises(ValueError, match="namespace must not be empty"):
        mistri_locks.Redis(namespace="")
    with pytest.raises(ValueError, match="namespace"):
        mistri_locks.Redis(namespace="a{b}")
    with pytest.raises(TypeError):
        mistri_locks.Redis(url=6379)  # type: ignore[arg-type]


def test_password_stays_out_of_messages() -> None:
    with pytest.raises(mistri_locks.Error) as info:
        mistri_locks.Redis("redis://user:s3cret@127.0.0.1:notaport/0")
    assert "s3cret" not in str(info.value)


def test_unreachable_redis_is_a_connection_error() -> None:
    port = free_port()  # nothing listens there
    r = mistri_locks.Redis(f"redis://127.0.0.1:{port}/0")
    t0 = time.monotonic()
    for op in (
        lambda: r.acquire("k", 1),
        lambda: r.held("k"),
        lambda: r.set_flag("k"),
        lambda: r.hold("k"),
    ):
        with pytest.raises(mistri_locks.ConnectionError) as info:
            op()
        assert isinstance(info.value, mistri_locks.Error)
        assert isinstance(info.value, builtins.ConnectionError)
        assert str(port) in str(info.value) or "connect" in str(info.value).lower()
    assert time.monotonic() - t0 < 10
    # the builtin name catches it too
    try:
        r.flag("k")
    except ConnectionError:
        pass
    else:
        pytest.fail("no ConnectionError")


def test_one_vocabulary_and_the_old_names_are_gone() -> None:
    m = mistri_locks.Memory()
    assert isinstance(m, mistri_locks.Locks)
    assert not hasattr(mistri_locks, "Adapter") and not hasattr(m, "sharing_adapter")
    for owner in (m.new_owner(),):
        assert type(owner) is mistri_locks.Memory
        assert owner.acquire("vocab", 5)
        assert not m.acquire("vocab", 5), "another owner, same store"
        owner.release("vocab")


def test_configure_takes_the_handle_positionally_or_as_locks() -> None:
    import warnings

    locks = mistri_locks.Memory()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the current spelling never warns
        mistri_locks.configure(locks)
        assert mistri_locks.locks() is locks
        mistri_locks.configure(None)
        assert mistri_locks.locks() is None
        mistri_locks.configure(locks=locks)
        assert mistri_locks.locks() is locks
        mistri_locks.configure(locks=None)
    assert mistri_locks.locks() is None


def test_configure_needs_exactly_one_handle() -> None:
    locks = mistri_locks.Memory()
    with pytest.raises(TypeError, match="missing"):
        mistri_locks.configure()  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="adapter"):
        mistri_locks.configure(locks, adapter=locks)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="adapter"):
        mistri_locks.configure(adapter=locks)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        mistri_locks.configure(locks, locks)  # type: ignore[call-arg]
    assert mistri_locks.locks() is None
