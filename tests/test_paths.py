"""Runtime paths: private directories and socket paths libzmq accepts."""

from __future__ import annotations

import os

import pytest
import zmq

from kirolearn import paths


def test_a_deep_home_moves_sockets_to_a_short_private_directory(tmp_path):
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    run = paths.runtime_dir(deep)
    assert str(run).startswith("/tmp/kirolearn-")
    assert run == paths.runtime_dir(deep)  # stable for the same home
    assert run != paths.runtime_dir(tmp_path / "other" / ("d" * 60) / ("e" * 60))
    longest = paths.endpoint("extraction-64.ctl", deep)[len("ipc://"):]
    assert len(longest) <= zmq.IPC_PATH_MAX_LEN


def test_layout_is_private(tmp_path):
    base = tmp_path / "home"
    paths.ensure_layout(base)
    for directory in (base, paths.runtime_dir(base), paths.log_dir(base)):
        assert directory.stat().st_mode & 0o777 == 0o700
    os.chmod(base, 0o755)
    paths.ensure_layout(base)  # a loosened directory is tightened again
    assert base.stat().st_mode & 0o777 == 0o700


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to create a foreign-owned directory")
def test_a_directory_owned_by_someone_else_is_refused(tmp_path):
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    os.chown(foreign, 12345, 12345)
    with pytest.raises(PermissionError):
        paths.ensure_private_dir(foreign)
