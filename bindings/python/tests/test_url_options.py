"""A URL option its backend does not know is a ``ValueError`` at open,
before anything connects (issue 39, findings 3 and 15): the message names
the option and the nearest known one, the password masked. The URLs point
at closed ports, so the error cannot be a connection error."""

from __future__ import annotations

import pathlib

import pytest

import mistri_locks

TYPOS = [
    ("min_replica=all", "min_replica", "min_replicas"),
    ("minreplicas=all", "minreplicas", "min_replicas"),
    ("MIN_REPLICAS=all", "MIN_REPLICAS", "min_replicas"),
]


@pytest.mark.parametrize("pair,key,meant", TYPOS)
def test_a_mistyped_redis_option_names_the_right_one(pair: str, key: str, meant: str) -> None:
    url = f"redis://admin:s3cret@127.0.0.1:1/0?{pair}"
    want = f'unknown option "{key}" in redis://admin:***@127.0.0.1:1/0; did you mean "{meant}"?'
    for opener in (lambda: mistri_locks.open(url), lambda: mistri_locks.Redis(url=url)):
        with pytest.raises(ValueError) as raised:
            opener()
        assert str(raised.value) == want
        assert "s3cret" not in str(raised.value)


@pytest.mark.parametrize("pair", ["bogus=1", "timeout=abc"])
def test_an_unknown_option_lists_the_known_ones(pair: str) -> None:
    url = f"redis+cluster://127.0.0.1:1,127.0.0.1:2?{pair}"
    with pytest.raises(ValueError, match="redis\\+cluster:// takes: min_replicas, replica_timeout"):
        mistri_locks.open(url)
    with pytest.raises(ValueError, match=f'unknown option "{pair.split("=")[0]}"'):
        mistri_locks.Redis(url=url)


def test_a_bad_value_names_the_option_and_the_value() -> None:
    with pytest.raises(ValueError, match='replica_timeout must be a number of seconds, got "abc"'):
        mistri_locks.open("redis://127.0.0.1:1/0?min_replicas=1&replica_timeout=abc")


def test_postgres_and_sentinel_too() -> None:
    with pytest.raises(ValueError, match='unknown option "sslmod" in postgres://u:\\*\\*\\*@127'):
        mistri_locks.Postgres(url="postgres://u:s3cret@127.0.0.1:1/db?sslmod=require")
    with pytest.raises(ValueError, match='did you mean "sentinel_password"'):
        mistri_locks.open("redis+sentinel://127.0.0.1:1/m?sentinel_pasword=s3cret")


def test_a_file_url_query_is_refused(tmp_path: pathlib.Path) -> None:
    url = f"file://{tmp_path}/x.db?mode=ro"
    for opener in (lambda: mistri_locks.open(url), lambda: mistri_locks.Local(path=url)):
        with pytest.raises(ValueError, match='unknown option "mode" in file://.*file:// takes no options'):
            opener()
    assert list(tmp_path.iterdir()) == []
