"""Commands that give memory its past: seed (a repository's history) and import-sessions
(an agent's own transcripts), each made into the events live work would have sent."""

from __future__ import annotations

import json
import os
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import click

from kirolearn import control, importer, paths, protocol, rules, transcripts
from kirolearn import project as kl_project
from kirolearn import seed as kl_seed
from kirolearn.cli import common
from kirolearn.cli.common import require_served
from kirolearn.transcripts import replay


@click.command()
@click.option("--git", "from_git", is_flag=True,
              help="Replay the repository's commits as sessions (the only source yet).")
@click.option("--project", type=click.Path(exists=True, file_okay=False), default=None,
              help="The repository (default: the one the current directory is in).")
@click.option("--since", metavar="DATE", help="Only commits since DATE (as git reads it:"
              " 2024-01-01, '6 months ago').")
@click.option("--limit", type=click.IntRange(1, None), default=None, metavar="N",
              help="Only the newest N commits.")
def seed(from_git: bool, project: str | None, since: str | None, limit: int | None) -> None:
    """Give a repository's memory its past on day one: each commit replayed as a
    session (its message the request, its diff the edits, its time the work's), made
    into records as live work is, the project's history (each record keeps its commit's
    author, a filter of the viewer and of stats); and its rule files (CLAUDE.md, AGENTS.md,
    .cursorrules…) each made into a record, kept up to date as they change.

    Run it again at any time: what was seeded is not stored twice, and a run picks up
    after the last one (or where a killed one got to). Merge commits, bots' commits,
    formatting commits and mass changes are left out.

    \b
    Examples:
        kirolearn seed --git
        kirolearn seed --git --project ~/code/app --since 2024-01-01
        kirolearn seed --git --limit 500
    """
    if not from_git:
        raise click.UsageError("say what to seed from: --git (the repository's history)")
    here, newest = _repository(project, since)
    root = here.checkout
    require_served()
    home = common.home()
    after = None if since or limit else kl_seed.last_seeded(home, root)
    try:
        commits = kl_seed.history(root, after, since, limit)
    except kl_seed.GitFailed as exc:
        raise click.ClickException(str(exc)) from exc
    why = {c.sha: kl_seed.left_out(c) for c in commits}
    kept = [c for c in commits if why[c.sha] is None]
    started = time.monotonic()
    try:
        with click.progressbar(length=len(kept), label=f"seeding {len(kept)} commit(s)",
                               show_pos=True, file=sys.stderr) as bar:
            resume = kl_seed.Resume(home, root)
            report = importer.import_lines(
                resume.lines(root, kept, here, lambda commit: bar.update(1)), home,
                answered=resume.answered)
    except (importer.Stalled, kl_seed.GitFailed) as exc:
        raise click.ClickException(f"{exc}; run it again to go on") from exc
    seconds = time.monotonic() - started
    if not report.counts["rejected"]:
        kl_seed.remember(home, root, newest)
    counts = report.counts
    click.echo(f"seeded {len(kept)} commit(s) in {seconds:.1f} s"
               f" ({len(kept) / max(seconds, 1e-3):.1f}/s): "
               + _said(report, Counter(reason for reason in why.values() if reason), "commit"))
    _send_rule_files(home, here)
    if counts["stored"]:
        click.echo("their records come as extraction gets to them: `kirolearn stats` says"
                   " how many events are still pending")
    if counts["rejected"]:
        sys.exit(1)


def _repository(project: str | None, since: str | None) -> tuple[kl_project.Project, str]:
    """The project to seed (the one ``project`` or the current directory is in) and its
    newest commit; a clear error when it is no git repository or ``since`` no date."""
    asked = os.path.abspath(project or os.getcwd())
    here = kl_project.resolve_project(asked)
    newest = None if here.is_global else kl_seed.head(here.checkout)
    if newest is None:
        raise click.ClickException(f"{asked} is not in a git repository; run it in one, or"
                                   " give --project")
    if since is not None and kl_seed.since_time(here.checkout, since) is None:
        raise click.BadParameter(f"{since!r} is not a date git can read (try 2024-01-01"
                                 " or '6 months ago')", param_hint="--since")
    return here, newest


def _send_rule_files(home: paths.Home, here: kl_project.Project) -> None:
    """Each of the project's rule files made a record (and kept up to date)."""
    try:
        sent = rules.send(home, here, kl_project.actor_id(), str(Path.home()), everything=True,
                          timeout_ms=control.WRITE_MS)
    except (control.Timeout, protocol.RemoteError) as exc:
        raise click.ClickException(f"the rule files could not be stored: {exc}") from exc
    if sent:
        click.echo("rule files: " + ", ".join(f"{name} {status}"
                                              for name, status in sent.items()))


@click.command(name="import-sessions")
@click.option("--agent", required=True, type=click.Choice(sorted(transcripts.READERS)),
              help="Whose stored sessions to read.")
@click.option("--project", type=click.Path(file_okay=False, exists=True), default=None,
              help="Only the sessions of this project (default: every project's).")
def import_sessions(agent: str, project: str | None) -> None:
    """Give memory the sessions an agent kept before kirolearn was there: its own
    stored transcripts (Claude Code's ~/.claude/projects, Codex's ~/.codex/sessions,
    Gemini CLI's ~/.gemini/tmp, Copilot CLI's ~/.copilot/session-state, OpenCode's
    database), made into the events its hooks would have sent, each into its project's
    memory.

    Run it again at any time: what was imported is not stored twice, a transcript that
    grew adds its new part, and a session kirolearn's hooks captured live is left
    alone. A line that cannot be read is reported and the rest imported.

    \b
    Examples:
        kirolearn import-sessions --agent claude-code
        kirolearn import-sessions --agent codex --project ~/code/app
    """
    require_served()
    home = common.home()
    only = kl_project.resolve_project(project, override="") if project else None
    found: list[replay.Session] = []

    def lines() -> Iterator[str]:
        """The sessions' events as JSON lines, made as each transcript is read (no
        transcript is held whole); each session noted once read."""
        made = replay.imported(transcripts.READERS[agent], Path.home(), home,
                               kl_project.actor_id(), only)
        with click.progressbar(length=0, label="importing sessions", show_pos=True,
                               file=sys.stderr) as bar:
            for item in made:
                if isinstance(item, replay.Session):
                    found.append(item)
                    bar.update(1)
                    for problem in item.transcript.problems:
                        click.echo(f"{item.transcript.path}: {problem}", err=True)
                else:
                    yield json.dumps(item, ensure_ascii=False)

    started = time.monotonic()
    try:
        report = importer.import_lines(lines(), home)
    except importer.Stalled as exc:
        raise click.ClickException(f"{exc}; run it again to go on") from exc
    except (control.Timeout, protocol.RemoteError) as exc:
        raise click.ClickException(f"the daemon could not say which sessions it holds: {exc}"
                                   ) from exc
    counts = report.counts
    imported = sum(1 for s in found if s.sent and s.left_out is None)
    click.echo(f"imported {imported} session(s) of {agent} in {time.monotonic() - started:.1f} s: "
               + _said(report, Counter(s.left_out for s in found if s.left_out), "session")
               + (f"; {sum(len(s.transcript.problems) for s in found)} line(s) unreadable"
                  if any(s.transcript.problems for s in found) else ""))
    if counts["stored"]:
        click.echo("their records come as extraction gets to them: `kirolearn stats` says"
                   " how many events are still pending")
    if counts["rejected"]:
        sys.exit(1)


def _said(report: importer.Report, skipped: Counter, what: str) -> str:
    """What seed and import-sessions stored, and which of ``what`` (commits, sessions)
    they left out and why (each rejected event said on stderr first)."""
    for line_no, reason in sorted(report.rejected):
        click.echo(f"event {line_no}: rejected: {reason}", err=True)
    counts = report.counts
    return (f"events stored {counts['stored']}, duplicate {counts['duplicate']},"
            f" rejected {counts['rejected']}"
            + (f"; left out {sum(skipped.values())} {what}(s): "
               + ", ".join(f"{n} {reason}" for reason, n in skipped.most_common())
               if skipped else ""))


COMMANDS = [seed, import_sessions]
