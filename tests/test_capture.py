"""Where nothing is captured: ``kirolearn pause`` / ``resume`` (everywhere or for one
project) and ``capture.exclude`` globs, honoured by the real shims from the home's files
alone: no event sent or spooled, no context printed, no daemon started."""

from __future__ import annotations

import json

from helpers.cli import here, kl
from helpers.events import stored_events
from helpers.workspace import Workspace


def prompt(ws: Workspace, text: str, hook: str = "kirolearn-claude-code") -> str:
    payload = {"session_id": "s-1", "cwd": str(ws.project),
               "hook_event_name": "UserPromptSubmit", "prompt": text}
    result, _ = ws.hook(hook, payload, KIROLEARN_DEBUG="1")
    assert result.returncode == 0
    return result.stderr


def prompts() -> list[str]:
    return [e["body"]["content"] for e in stored_events() if e["kind"] == "prompt"]


def test_pause_and_resume_everywhere_or_for_a_project(daemon, tmp_path):
    ws, other = Workspace(tmp_path / "a"), Workspace(tmp_path / "b")
    said = kl("pause", "--project", str(ws.project), env=ws.env(), check=True)
    assert said.stdout.strip() == (f"capture paused for {ws.root}; `kirolearn resume` turns"
                                   " it back on")
    assert f"not captured: capture is paused for {ws.root}" in prompt(ws, "paused prompt")
    prompt(other, "the other project goes on")
    assert prompts() == ["the other project goes on"]

    kl("pause", check=True)
    assert "capture is paused everywhere" in prompt(other, "paused everywhere")
    refused = kl("resume", "--project", str(other.project), env=other.env())
    assert refused.returncode == 1 and "it is paused everywhere" in refused.stderr
    still = kl("resume", "--project", str(ws.project), env=ws.env(), check=True)
    assert still.stdout.strip() == f"capture resumed for {ws.root}; it is still paused everywhere"
    assert "paused everywhere" in prompt(ws, "still paused")
    assert kl("resume", check=True).stdout.strip() == "capture resumed everywhere"
    assert kl("resume", check=True).stdout.strip() == "capture was not paused"
    prompt(ws, "captured again")
    assert prompts() == ["the other project goes on", "captured again"]
    assert not list(here().spool_dir.glob("*.json"))


def test_a_paused_hook_neither_spools_nor_starts_the_daemon(home, tmp_path):
    ws = Workspace(tmp_path)
    kl("pause", check=True)
    assert "not captured" in prompt(ws, "while paused and stopped", "kirolearn-kiro-cli")
    assert not here().spool_dir.exists() or not list(here().spool_dir.iterdir())
    stopped = kl("status")
    assert "not running" in stopped.stdout + stopped.stderr


def test_capture_exclude_globs_from_the_config_file(daemon, tmp_path):
    ws, other = Workspace(tmp_path / "a"), Workspace(tmp_path / "b")
    (daemon / "config.toml").write_text(
        '[capture]\nexclude = ["' + str(tmp_path / "a") + '/*"]\n')
    assert f"matches capture.exclude '{tmp_path / 'a'}/*'" in prompt(ws, "excluded")
    prompt(other, "included")
    assert prompts() == ["included"]
    (daemon / "config.toml").write_text("[capture]\nexclude = 7\n")  # broken: nothing leaks
    assert "the capture settings cannot be read" in prompt(other, "while the config is broken")
    assert json.loads(kl("stats", "--json", check=True).stdout)["totals"]["events"] == 1


def test_opt_in_captures_only_the_projects_enabled_in_the_home(daemon, tmp_path):
    """Under ``capture.opt_in`` no project is captured until `kirolearn enable` names
    it; nothing the repository holds can turn it on; `status` and `doctor` say so."""
    ws, other = Workspace(tmp_path / "a"), Workspace(tmp_path / "b")
    (daemon / "config.toml").write_text("[capture]\nopt_in = true\n")
    (ws.project / ".kirolearn").mkdir()  # a cloned repository's own files enable nothing
    (ws.project / ".kirolearn" / "enabled.json").write_text(json.dumps([ws.root]))
    assert (f"capture is opt-in (capture.opt_in) and {ws.root} is not enabled"
            in prompt(ws, "not yet"))
    assert "opt-in (capture.opt_in) and no project enabled yet" in kl(
        "status", check=True).stdout
    said = kl("enable", "--project", str(ws.project), env=ws.env(), check=True)
    assert said.stdout.strip() == f"capture enabled for {ws.root}"
    prompt(ws, "captured")
    assert "not enabled" in prompt(other, "the other project is not")
    assert prompts() == ["captured"]
    assert f"note  capture: opt-in (capture.opt_in): only {ws.root}" in kl(
        "doctor", "--project", str(ws.project)).stdout
    kl("disable", "--project", str(ws.project), env=ws.env(), check=True)
    assert "not enabled" in prompt(ws, "off again")
    refused = kl("disable", "--project", str(ws.project), env=ws.env())
    assert refused.returncode == 1 and "was not enabled" in refused.stderr
    assert prompts() == ["captured"]
