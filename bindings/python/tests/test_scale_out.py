"""The Cluster and Sentinel URL forms reach Python through the core's one
URL dispatcher (the full suites run in core/tests/scale_out.rs)."""

import pytest

import mistri_locks


def test_cluster_and_sentinel_urls_are_accepted() -> None:
    cluster = mistri_locks.Redis(url="redis+cluster://127.0.0.1:1,127.0.0.1:2")
    with pytest.raises(mistri_locks.ConnectionError, match="CLUSTER SLOTS"):
        cluster.held("job")
    sentinel = mistri_locks.Redis(url="redis+sentinel://127.0.0.1:1/mymaster/0")
    with pytest.raises(mistri_locks.ConnectionError, match="sentinel"):
        sentinel.held("job")


def test_bad_scale_out_urls_are_config_errors() -> None:
    with pytest.raises(mistri_locks.ConfigError):
        mistri_locks.Redis(url="redis+sentinel://127.0.0.1:1")
    # A bad min_replicas is an invalid argument: ValueError, as for a NaN ttl.
    with pytest.raises(ValueError, match="min_replicas"):
        mistri_locks.Redis(url="redis://127.0.0.1:1/0?min_replicas=x")
