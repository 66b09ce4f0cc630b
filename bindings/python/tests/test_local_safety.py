"""Local refuses a database that another user could tamper with, with a
ConfigError naming the path and the problem; its default path is the same
for every process of the user."""

from __future__ import annotations

import os
import pathlib

import pytest

import mistri_locks


def refused(path: pathlib.Path, problem: str) -> None:
    with pytest.raises(mistri_locks.ConfigError) as caught:
        mistri_locks.Local(path)
    message = str(caught.value)
    assert str(path) in message
    assert problem in message


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a folder to another user")
def test_a_folder_of_another_user_is_refused(tmp_path: pathlib.Path) -> None:
    for mode in (0o700, 0o1777):
        folder = tmp_path / f"f{mode:o}"
        folder.mkdir()
        os.chmod(folder, mode)
        os.chown(folder, 65534, 65534)
        refused(folder / "locks.db", "belongs to uid 65534")
        assert not (folder / "locks.db").exists()


@pytest.mark.parametrize("mode", [0o770, 0o777, 0o1777])
def test_a_folder_others_can_write_is_refused(tmp_path: pathlib.Path, mode: int) -> None:
    folder = tmp_path / "shared"
    folder.mkdir()
    os.chmod(folder, mode)
    refused(folder / "locks.db", "writable by other users")


def test_symbolic_links_are_refused(tmp_path: pathlib.Path) -> None:
    real = tmp_path / "real.db"
    link = tmp_path / "locks.db"
    link.symlink_to(real)
    refused(link, "symbolic link")
    assert not real.exists(), "the link was followed"
    (tmp_path / "real").mkdir()
    (tmp_path / "linked").symlink_to(tmp_path / "real")
    refused(tmp_path / "linked" / "locks.db", "symbolic link")


def test_the_default_path_depends_on_the_uid_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MISTRI_LOCKS_LOCAL_PATH", raising=False)
    expected = pathlib.Path(f"/var/tmp/mistri_locks-{os.getuid()}/locks.db")
    monkeypatch.setenv("XDG_RUNTIME_DIR", "/nonexistent-runtime")
    monkeypatch.setenv("TMPDIR", "/nonexistent-tmp")
    assert mistri_locks.Local().path == expected
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    assert mistri_locks.Local().path == expected


def test_the_environment_variable_overrides_the_default(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    chosen = tmp_path / "chosen.db"
    monkeypatch.setenv("MISTRI_LOCKS_LOCAL_PATH", str(chosen))
    assert mistri_locks.Local().path == chosen
    assert chosen.exists()
    explicit = tmp_path / "explicit.db"
    assert mistri_locks.Local(explicit).path == explicit
