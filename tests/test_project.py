"""The one project-root rule shared by shims, MCP server and CLI."""

from __future__ import annotations

import os
import subprocess

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kirolearn import project


@pytest.fixture
def tree(tmp_path):
    home = tmp_path / "home"
    (home / "code" / "app" / "src" / "deep").mkdir(parents=True)
    (home / "code" / "app" / "pyproject.toml").write_text("")
    (home / "notes").mkdir()
    return home


def test_nearest_marker_wins(tree):
    found = project.resolve_project(tree / "code" / "app" / "src" / "deep", home=str(tree),
                                    override="")
    assert found.root == str(tree / "code" / "app")
    assert found.project_id == project.sha256_hex(str(tree / "code" / "app"))
    assert not found.is_global
    nested = tree / "code" / "app" / "src"
    (nested / "package.json").write_text("{}")
    assert project.resolve_project(nested / "deep", home=str(tree), override="").root == str(nested)


def test_home_itself_is_never_inspected(tree):
    (tree / ".git").mkdir()  # a dotfiles repo in $HOME must not swallow every project
    found = project.resolve_project(tree / "notes", home=str(tree), override="")
    assert found.is_global and found.root == str(tree)


@pytest.mark.parametrize("where", ["home", "outside"])
def test_home_or_an_unmarked_directory_outside_home_is_global(tree, tmp_path, where):
    cwd = tree if where == "home" else tmp_path / "scratch"
    cwd.mkdir(exist_ok=True)
    found = project.resolve_project(cwd, home=str(tree), override="")
    assert found.is_global and found.root == str(tree)


def test_a_repository_outside_home_is_a_project(tree, tmp_path):
    repo = tmp_path / "srv" / "billing"
    (repo / ".git").mkdir(parents=True)
    (repo / "src").mkdir()
    found = project.resolve_project(repo / "src", home=str(tree), override="")
    assert not found.is_global and found.root == str(repo)


def test_symlinked_cwd_resolves_to_the_real_project(tree):
    link = tree / "shortcut"
    link.symlink_to(tree / "code" / "app" / "src")
    assert project.resolve_project(link, home=str(tree), override="").root == str(
        tree / "code" / "app")


def test_override_by_directory_and_by_name(tree):
    by_dir = project.resolve_project(tree / "notes", home=str(tree),
                                     override=str(tree / "code" / "app"))
    assert by_dir.root == str(tree / "code" / "app")
    by_name = project.resolve_project(tree / "notes", home=str(tree), override="billing")
    assert by_name.project_id == project.sha256_hex("name:billing")
    assert by_name.namespace("me") == f"/actor/me/project/{by_name.project_id}/"


def test_environment_override(tree, monkeypatch):
    monkeypatch.setenv("KIROLEARN_PROJECT", "shared-memory")
    assert project.resolve_project(tree / "notes", home=str(tree)).project_id == \
        project.sha256_hex("name:shared-memory")


def test_git_worktrees_share_the_main_checkout(tree):
    main = tree / "code" / "repo"
    main.mkdir()
    git = ["git", "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q", str(main)], check=True)
    subprocess.run([*git, "-C", str(main), "commit", "-q", "--allow-empty", "-m", "x"],
                   check=True)
    worktree = tree / "code" / "repo-feature"
    subprocess.run([*git, "-C", str(main), "worktree", "add", "-q", str(worktree)], check=True)
    (worktree / "lib").mkdir()
    found = project.resolve_project(worktree / "lib", home=str(tree), override="")
    assert found.root == str(main) and found.checkout == str(worktree)
    assert found.project_id == project.resolve_project(main, home=str(tree),
                                                       override="").project_id


names = st.text(st.characters(whitelist_categories=("Ll", "Nd")), min_size=1, max_size=8)


@settings(max_examples=50, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parts=st.lists(names, min_size=1, max_size=5), marker_at=st.integers(-1, 4),
       marker=st.sampled_from(project.MARKERS))
def test_root_is_the_nearest_marked_ancestor_below_home(tmp_path_factory, parts, marker_at,
                                                        marker):
    home = tmp_path_factory.mktemp("home")
    cwd = home.joinpath(*parts)
    cwd.mkdir(parents=True, exist_ok=True)
    expected = home
    if 0 <= marker_at < len(parts):
        expected = home.joinpath(*parts[: marker_at + 1])
        target = expected / marker
        if not target.exists():
            target.mkdir() if marker.startswith(".") else target.write_text("")
    found = project.resolve_project(cwd, home=str(home), override="")
    assert found.root == os.path.realpath(expected)
    assert found.is_global == (expected == home)
