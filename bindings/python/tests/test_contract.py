"""The contract suite: the cases of tests/contract/cases.txt (shared with the
Rust, C and Ruby suites; format in tests/contract/README.md) run through the
Python face against every backend in conftest.BACKENDS, then what only
Python can say (``with``, ``del``, type errors, numbers, threads)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, Optional

import pytest

import mistri_locks

CASES_FILE = Path(__file__).resolve().parents[3] / "tests" / "contract" / "cases.txt"


def _words(line: str) -> list[str]:
    """Spaces separate, quotes group (possibly nothing), ``#`` comments."""
    words: list[str] = []
    word: Optional[str] = None
    quoted = False
    for c in line:
        if c == "#" and not quoted and word is None:
            break
        if c.isspace() and not quoted:
            if word is not None:
                words.append(word)
            word = None
        elif c == '"':
            quoted = not quoted
            word = word or ""
        else:
            word = (word or "") + c
    if word is not None:
        words.append(word)
    return words


def _parse() -> dict[str, list[tuple[int, list[str]]]]:
    cases: dict[str, list[tuple[int, list[str]]]] = {}
    steps: list[tuple[int, list[str]]] = []
    for number, line in enumerate(CASES_FILE.read_text().splitlines(), 1):
        words = _words(line)
        if words[:1] == ["case"]:
            steps = cases.setdefault(words[1], [])
        elif words:
            steps.append((number, words))
    return cases


CASES = _parse()

OUTCOMES = {"released": True, "already_released": False, "lost": False, "not_held": False}


class Step(AssertionError):
    pass


class Run:
    """One case's world: owners, holds, signals and the fences it saw."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.owners: dict[str, Any] = {}
        self.holds: dict[str, Any] = {}
        self.signals: dict[str, mistri_locks.AbortSignal] = {}
        self.fences: dict[str, int] = {}
        self.mark = time.monotonic()

    def owner(self, name: str) -> Any:
        if name not in self.owners:
            self.owners[name] = self.backend.adapter() if name == "A" else self.backend.owner()
        return self.owners[name]

    def signal(self, name: str) -> Any:
        return self.signals[name] if name in self.signals else self.holds[name].signal

    def fence(self, key: str, got: Optional[int], want: Optional[str]) -> None:
        last = self.fences.get(key, 0)
        if want == "none":
            assert got is None, f"fence {got}"
        elif want == "same":
            assert got == last, f"fence {got}, the last one {last}"
        elif want == "greater":
            assert isinstance(got, int) and got > last, f"fence {got}, the last one {last}"
            self.fences[key] = got

    @staticmethod
    def options(words: list[str]) -> dict[str, Any]:
        names = {"ttl": "ttl", "heartbeat": "heartbeat", "stop": "stop_key", "signal": "signal"}
        return {names[k]: v for k, v in (w.split("=", 1) for w in words)}

    def hold(self, start: Any, key: str, words: list[str], want: Optional[str]) -> None:
        opts = self.options(words)
        for name in ("ttl", "heartbeat"):
            if name in opts:
                opts[name] = float(opts[name])
        if "signal" in opts:
            opts["signal"] = self.signal(opts["signal"])
        hold = start(key, **opts)
        if want == "none":
            assert hold is None, "got a hold, wanted none"
        elif want is not None:
            assert hold is not None, "refused, wanted a hold"
            self.holds[want] = hold

    def step(self, words: list[str]) -> None:
        args, want = words, None
        if "->" in words:
            i = words.index("->")
            args, want = words[:i], words[i + 1:]
        op, a = args[0], args[1:]
        w = want[0] if want else None
        if op == "error":
            assert want is not None and want[0] == "InvalidArgument", want
            with pytest.raises(ValueError) as raised:
                self.step(a)
            assert want[1] in str(raised.value), str(raised.value)
            return
        got: Any = None
        if op in ("acquire", "renew"):
            got = getattr(self.owner(a[0]), op)(a[1], float(a[2]))
        elif op in ("release", "held", "flag", "break_lease"):
            got = getattr(self.owner(a[0]), op)(a[1])
        elif op == "set_flag":
            ttl = [float(a[2])] if len(a) > 2 else []
            assert self.owner(a[0]).set_flag(a[1], *ttl) is None
        elif op == "clear_flag":
            assert self.owner(a[0]).clear_flag(a[1]) is None
        elif op == "fence":
            return self.fence(a[1], self.owner(a[0]).fence(a[1]), w)
        elif op == "hold":
            return self.hold(self.owner(a[0]).hold, a[1], a[2:], w)
        elif op == "hold_configured":
            return self.hold(mistri_locks.hold, a[0], a[1:], w)
        elif op == "configure":
            mistri_locks.configure(None if a[0] == "none" else self.owner(a[0]))
        elif op == "hold.release":
            got = self.holds[a[0]].release()
            if w is not None:
                assert got is OUTCOMES[w], f"got {got}"
            return
        elif op == "hold.lost":
            got = self.holds[a[0]].lost
        elif op == "hold.fence":
            hold = self.holds[a[0]]
            return self.fence(hold.key, hold.fence, w)
        elif op == "hold.key":
            assert self.holds[a[0]].key == w
        elif op == "signal":
            self.signals[a[0]] = mistri_locks.AbortSignal()
        elif op == "abort":
            self.signal(a[0]).abort(*a[1:2])
        elif op == "aborted":
            got = self.signal(a[0]).aborted
        elif op == "wait":
            got = self.signal(a[0]).wait(float(a[1]))
        elif op == "reason":
            reason = self.signal(a[0]).reason
            assert reason is not None and a[2] in reason, f"reason {reason!r}"
        elif op == "same_signal":
            got = self.holds[a[0]].signal is self.signal(a[1])
        elif op == "sleep":
            time.sleep(float(a[0]))
        elif op == "mark":
            self.mark = time.monotonic()
        elif op == "elapsed":
            took = time.monotonic() - self.mark
            assert took <= float(a[1]), f"{took:.3f} s"
        else:
            raise Step(f"unknown step {op}")
        if w in ("true", "false"):
            assert got is (w == "true"), f"got {got!r}"


@pytest.mark.parametrize("case", list(CASES))
def test_contract(backend, case: str) -> None:
    run = Run(backend)
    try:
        for number, words in CASES[case]:
            try:
                run.step(words)
            except AssertionError as e:
                raise Step(f"cases.txt:{number}: {' '.join(words)}: {e}") from None
    finally:
        for hold in run.holds.values():
            hold.release()


def test_the_data_has_every_case_once() -> None:
    text = CASES_FILE.read_text()
    names = [w[1] for w in map(_words, text.splitlines()) if w[:1] == ["case"]]
    assert len(names) == len(set(names)) == len(CASES) >= 10
    assert _words('error hold A k stop="" -> InvalidArgument "a b" # c') == [
        "error", "hold", "A", "k", "stop=", "->", "InvalidArgument", "a b"
    ]


# ---------------------------------------------- what only Python can say


def test_leaving_the_with_block_releases(backend) -> None:
    a = backend.adapter()
    hold = a.hold("scoped", ttl=5, heartbeat=1)
    assert hold is not None
    with hold as h:
        assert h is hold
        assert a.held("scoped")
    assert not a.held("scoped")
    with pytest.raises(RuntimeError):
        with a.hold("scoped2", ttl=5, heartbeat=1):  # type: ignore[union-attr]
            raise RuntimeError("work failed")
    assert not a.held("scoped2"), "released on the way out of an exception"


def test_dropping_a_hold_releases_it(backend) -> None:
    a = backend.adapter()
    hold = a.hold("dropped", ttl=5, heartbeat=1)
    assert a.held("dropped")
    del hold
    assert not a.held("dropped")
    # a lost hold dropped deletes nothing: the next holder is safe
    lost = a.hold("victim", ttl=0.3, heartbeat=0.05)
    assert lost is not None
    backend.delete_lease("victim")
    assert lost.signal.wait(1.0)
    b = backend.owner()
    assert b.acquire("victim", 5)
    del lost
    assert b.held("victim")


def test_contending_threads_never_both_hold(backend) -> None:
    threads_n, wins_each = 8, 3
    inside = 0
    inside_lock = threading.Lock()
    barrier = threading.Barrier(threads_n)
    deadline = time.monotonic() + 20
    results: list[tuple[int, int]] = []
    failures: list[str] = []

    def contend() -> None:
        nonlocal inside
        adapter = backend.owner()
        barrier.wait()
        wins = refusals = 0
        while wins < wins_each and time.monotonic() < deadline:
            hold = adapter.hold("contended", ttl=5, heartbeat=1)
            if hold is None:
                refusals += 1
                continue
            with inside_lock:
                inside += 1
                if inside != 1:
                    failures.append("two holders at once")
            time.sleep(0.003)
            with inside_lock:
                inside -= 1
            if hold.release() is not True:
                failures.append("release did not delete the lease")
            wins += 1
        results.append((wins, refusals))

    threads = [threading.Thread(target=contend) for _ in range(threads_n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures
    assert all(w == wins_each for w, _ in results), results
    assert sum(r for _, r in results) > 0, f"no contention: {results}"


def test_integers_too_large_for_a_float_are_value_errors(backend) -> None:
    a = backend.adapter()
    for call in (
        lambda: a.acquire("k", 10**400),
        lambda: a.renew("k", 10**400),
        lambda: a.set_flag("k", 10**400),
        lambda: a.hold("k", ttl=10**400),
    ):
        with pytest.raises(ValueError, match="ttl"):
            call()
    with pytest.raises(ValueError, match="heartbeat"):
        a.hold("k", heartbeat=10**400)
    assert not a.held("k")


@pytest.mark.parametrize("bad", [True, False, "1", None, b"1", [1]])
def test_non_numbers_are_type_errors(backend, bad: object) -> None:
    a = backend.adapter()
    with pytest.raises(TypeError, match="ttl"):
        a.acquire("k", bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="ttl"):
        a.hold("k", ttl=bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="heartbeat"):
        a.hold("k", heartbeat=bad)  # type: ignore[arg-type]
    assert not a.held("k")


def test_keys_that_are_not_str_are_type_errors(backend) -> None:
    a = backend.adapter()
    for call in (
        lambda k: a.acquire(k, 1),
        lambda k: a.renew(k, 1),
        a.release,
        a.held,
        lambda k: a.set_flag(k, 1),
        a.flag,
        a.clear_flag,
        a.break_lease,
        a.hold,
    ):
        with pytest.raises(TypeError):
            call(42)
        with pytest.raises(TypeError):
            call(b"key")
    with pytest.raises(TypeError, match="signal must be"):
        a.hold("k", signal=42)  # type: ignore[arg-type]
    assert not a.held("k")


def test_numbers_other_than_float_are_accepted(backend) -> None:
    a = backend.adapter()
    assert a.acquire("int", 5)
    assert a.renew("int", 5.5)

    class Secs:
        def __float__(self) -> float:
            return 2.0

    assert a.acquire("float-like", Secs())  # type: ignore[arg-type]


class _Name(str):
    """A str subclass, as frameworks pass (enum values, markup strings)."""


@pytest.mark.parametrize("key", ["clé", "ключ-鍵", "lock-🔒", _Name("named")])
def test_keys_beyond_ascii_are_one_key_everywhere(backend, key: str) -> None:
    # The operations read a key in place (the str's own UTF-8), holds copy
    # it: both must name the same lease, on every backend, in the backend
    # itself (the Redis key is the UTF-8 of the str).
    a, b = backend.adapter(), backend.owner()
    assert a.acquire(key, 5)
    assert b.held(key) and not b.acquire(key, 5)
    assert a.fence(key) is not None
    info = a.info(key)
    assert info is not None and info["fence"] == a.fence(key)
    assert a.renew(key, 5)
    assert not b.release(key)
    assert a.release(key) and not b.held(key)
    with b.hold(key, ttl=5, heartbeat=1) as h:  # type: ignore[union-attr]
        assert h.key == key
        assert a.held(key) and not a.acquire(key, 5)
    assert not a.held(key)
    assert a.acquire(key, 5)
    backend.delete_lease(key)
    assert not b.held(key)
    a.set_flag(key, 5)
    assert b.flag(key)
    b.clear_flag(key)
    assert not a.flag(key)


def test_keys_with_lone_surrogates_are_unicode_errors(backend) -> None:
    a = backend.adapter()
    for call in (
        lambda k: a.acquire(k, 1),
        lambda k: a.renew(k, 1),
        a.release,
        a.held,
        a.info,
        a.fence,
        lambda k: a.set_flag(k, 1),
        a.flag,
        a.clear_flag,
        a.break_lease,
    ):
        with pytest.raises(UnicodeEncodeError):
            call("bad-\ud800")
    assert a.acquire("after-bad-key", 1), "the next call is unaffected"


def test_int_seconds_are_exact_and_checked(backend) -> None:
    a = backend.adapter()
    assert a.acquire("int-ttl", 7)
    info = a.info("int-ttl")
    assert info is not None and info["ttl"] == 7
    assert a.renew("int-ttl", 10**8)  # ~3 years: under the core's bound
    with pytest.raises(ValueError, match="ttl"):
        a.renew("int-ttl", -1)
    with pytest.raises(ValueError, match="ttl"):
        a.renew("int-ttl", 0)
    with pytest.raises(ValueError, match="ttl"):
        a.renew("int-ttl", 2**63)  # beyond i64: the general path

    class Seconds(int):
        pass

    assert a.renew("int-ttl", Seconds(3))
    info = a.info("int-ttl")
    assert info is not None and info["ttl"] == 3
