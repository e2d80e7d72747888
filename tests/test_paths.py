"""Runtime paths: private directories and socket paths libzmq accepts."""

from __future__ import annotations

import os
import shutil

import pytest
import zmq
from helpers.cli import kl
from helpers.workspace import Workspace

from kirolearn import paths, spool


def test_a_deep_home_moves_sockets_to_a_short_private_directory(tmp_path):
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    run = paths.Home(deep).runtime_dir()
    assert str(run).startswith("/tmp/kirolearn-")
    assert run == paths.Home(deep).runtime_dir()  # stable for the same home
    assert run != paths.Home(tmp_path / "other" / ("d" * 60) / ("e" * 60)).runtime_dir()
    longest = paths.Home(deep).endpoint("extraction-64.ctl")[len("ipc://"):]
    assert len(longest) <= zmq.IPC_PATH_MAX_LEN


def test_layout_is_private(tmp_path):
    base = tmp_path / "home"
    paths.Home(base).ensure_layout()
    for directory in (base, paths.Home(base).runtime_dir(), paths.Home(base).log_dir):
        assert directory.stat().st_mode & 0o777 == 0o700
    os.chmod(base, 0o755)
    paths.Home(base).ensure_layout()  # a loosened directory is tightened again
    assert base.stat().st_mode & 0o777 == 0o700


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to create a foreign-owned directory")
def test_a_directory_owned_by_someone_else_is_refused(tmp_path):
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    os.chown(foreign, 12345, 12345)
    with pytest.raises(PermissionError):
        paths.ensure_private_dir(foreign)


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to make another user's directory")
def test_a_deep_homes_runtime_name_taken_by_another_user_is_passed_over(home, tmp_path):
    """Another user (or a link) at the /tmp name a deep home's sockets go to: the next
    name is used, by the daemon and the hooks alike; with every name taken, start,
    status and doctor say why, without a traceback, and a hook keeps its event."""
    deep = home / ("d" * 60) / ("e" * 60)
    env = {**os.environ, "KIROLEARN_HOME": str(deep)}
    first = paths.Home(deep).runtime_dir()
    names = [first] + [first.with_name(f"{first.name}-{n}") for n in range(1, 8)]
    ours = tmp_path / "ours"
    ours.mkdir(mode=0o700)
    try:
        names[0].mkdir()
        os.chown(names[0], 12345, 12345)  # another user's
        names[1].symlink_to(ours)  # a link to a folder of ours
        names[2].mkdir(mode=0o777)  # ours, but open to all
        os.chmod(names[2], 0o777)
        assert paths.Home(deep).runtime_dir() == names[3]
        kl("start", env=env, check=True)
        ws = Workspace(tmp_path)
        try:
            result, _ = ws.hook("kirolearn-claude-code", {
                "session_id": "s", "cwd": str(ws.project), "hook_event_name": "UserPromptSubmit",
                "prompt": "hello"}, KIROLEARN_HOME=str(deep), KIROLEARN_AUTOSTART="0")
            assert result.returncode == 0 and not spool.waiting(paths.Home(deep))
            assert (names[3] / "ingest.sock").exists() and not os.listdir(ours)
        finally:
            kl("stop", env=env, check=True)
        for name in names[3:]:  # every name taken
            if name.exists():
                shutil.rmtree(name)
            name.mkdir()
            os.chown(name, 12345, 12345)
        for command in (["start"], ["status"], ["doctor"]):
            done = kl(*command, env=env)
            assert done.returncode != 0 and "Traceback" not in done.stderr + done.stdout
            assert "no private runtime directory" in done.stderr + done.stdout, done
        result, _ = ws.hook("kirolearn-claude-code", {
            "session_id": "s", "cwd": str(ws.project), "hook_event_name": "UserPromptSubmit",
            "prompt": "later"}, KIROLEARN_HOME=str(deep), KIROLEARN_AUTOSTART="0")
        assert result.returncode == 0 and len(spool.waiting(paths.Home(deep))) == 1
    finally:
        for name in names:
            if name.is_symlink():
                name.unlink()
            elif name.exists():
                shutil.rmtree(name)


def test_a_backup_never_follows_a_link_at_its_name(daemon, tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    target = tmp_path / "out.db"
    target.symlink_to(victim)
    refused = kl("backup", str(target))
    assert refused.returncode == 1 and "already exists" in refused.stderr
    assert victim.read_text() == "precious"
    dangling = tmp_path / "dangling.db"
    dangling.symlink_to(tmp_path / "nowhere.db")
    refused = kl("backup", str(dangling))
    assert refused.returncode == 1 and not (tmp_path / "nowhere.db").exists()
    # The old temporary name as a link changes nothing either: it is not used.
    (tmp_path / ".made.db.partial").symlink_to(victim)
    kl("backup", str(tmp_path / "made.db"), check=True)
    assert victim.read_text() == "precious"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".made.db.")] == [
        ".made.db.partial"]
