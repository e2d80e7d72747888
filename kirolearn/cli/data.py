"""Commands over what is stored: import, export, stats, search, brief, prune, scrub."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path

import click

from kirolearn import (
    contract,
    control,
    importer,
    paths,
    privacy,
    protocol,
    tooluse,
)
from kirolearn import project as kl_project
from kirolearn.cli import common
from kirolearn.cli.common import (
    ask,
    daemon_search,
    namespace_of,
    reader,
    require_running,
    require_served,
    scope_options,
    settings,
)
from kirolearn.config import MODES
from kirolearn.db import reads
from kirolearn.roles.hints import FILE_LIMIT
from kirolearn.search import worktree


@click.command(name="import")
@click.argument("file", type=click.File("rb"))
def import_(file) -> None:
    """Send v1 events, or a kirolearn export (JSON Lines; '-' for stdin), through ingest.

    An export's records come back with their versions, vectors and validity, its
    forgotten records stay forgotten, and the events it had already distilled are not
    extracted again; nothing already stored is replaced. Reports how many lines were
    stored, duplicate or rejected, with the reason for each rejected line; the rejected
    lines are kept in the quarantine folder. Exits 1 if any line was rejected.

    \b
    Example:
        kirolearn export > backup.jsonl && kirolearn import backup.jsonl
    """
    require_served()
    home = common.home()
    key = importer.file_key(file)
    skip = importer.resume_point(home, key) if key else 0
    if skip:
        click.echo(f"going on after line {skip}: an earlier run of this import stopped"
                   " there", err=True)
    size = os.fstat(file.fileno()).st_size if key else 0
    said: str | None = None  # without a terminal: the waiting, said once

    with (click.progressbar(length=max(size, 1), label="importing", file=sys.stderr)
          if sys.stderr.isatty() else contextlib.nullcontext()) as bar:
        def progress(done: importer.Progress) -> None:
            nonlocal said
            if bar is not None:
                bar.label = done.waiting or "importing"
                bar.update(max(0, done.done_bytes - bar.pos) if key else 0)
            elif done.waiting != said:
                said = done.waiting
                if said:
                    click.echo(said, err=True)

        try:
            report = importer.import_lines(
                file, home, skip, progress,
                lambda line_no: importer.keep_resume_point(home, key, line_no) if key else None)
        except importer.Stalled as exc:
            again = ("run the same command again to go on after it" if key else
                     "import a file (not a pipe) to be able to go on where it stops")
            raise click.ClickException(f"{exc}; {again}") from exc
        except importer.NotAnExport as exc:
            raise click.ClickException(str(exc)) from exc
    if key:
        importer.keep_resume_point(home, key, None)
    for line_no, reason in sorted(report.rejected):
        click.echo(f"line {line_no}: rejected: {reason}", err=True)
    counts = report.counts
    click.echo(f"stored {counts['stored']}, duplicate {counts['duplicate']},"
               f" rejected {counts['rejected']}"
               + (f", skipped {counts['skipped']} (sent by the earlier run)"
                  if counts["skipped"] else ""))
    if counts["rejected"]:
        click.echo(f"the rejected lines, with their reasons, are in {report.quarantine}",
                   err=True)
        sys.exit(1)


@click.command()
@scope_options
@click.option("--vectors", is_flag=True, help="With each record's vector (base64).")
def export(namespace: str | None, project: str | None, vectors: bool) -> None:
    """Write everything as JSON Lines to stdout: a header, the events, the records with
    their versions, and the ids of forgotten records. `kirolearn import` of it into
    another home gives back the same export.

    \b
    Examples:
        kirolearn export > everything.jsonl
        kirolearn export --project ~/code/app --vectors > app.jsonl
    """
    namespace = namespace_of(namespace, project)
    damaged: list[str] = []

    def report(what: str, why: str) -> None:
        damaged.append(what)
        click.echo(f"{what}: {why}", err=True)

    with reader() as conn:
        for line in reads.export_lines(conn, namespace, vectors, report):
            click.echo(line, nl=False)
    if damaged:
        raise click.ClickException(f"the database is damaged ({len(damaged)} problem(s), said"
                                   " above); everything else that could be read was written")


def aged(counts: dict) -> str:
    """How many records are stale (their code gone) and superseded (a later record
    undid their work)."""
    return f"stale {counts['stale']}, superseded {counts['superseded']}"


STATS_AUTHORS_SHOWN = 5  # a project's busiest authors on stats' line


@click.command()
@scope_options
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def stats(namespace: str | None, project: str | None, as_json: bool) -> None:
    """Counts per project (by name and folder): events by kind, records (and of them
    those stale, whose code is gone, and superseded, whose work a later one undid),
    pending extraction work, and the busiest authors of its records; and who
    contributed what (events and records per actor), when more than one actor did.

    \b
    Examples:
        kirolearn stats
        kirolearn stats --project ~/code/app --json
    """
    namespace = namespace_of(namespace, project)
    with reader() as conn:
        result = reads.stats(conn, namespace)
    if as_json:
        click.echo(json.dumps(result))
        return
    t = result["totals"]
    click.echo(f"events {t['events']}, records {t['records']} ({aged(t)}), pending events"
               f" {t['pending_events']}, pending batches {t['pending_batches']}")
    several = len(result["actors"]) > 1
    for ns in result["namespaces"]:
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(ns["events"].items())) or "no events"
        actor = kl_project.parts(ns["namespace"])[0]
        click.echo(f"{ns['name']}" + (f" ({ns['path']})" if ns["path"] else "")
                   + (f" · {actor}" if several else "")
                   + f"\n  {kinds}; records {ns['records']} ({aged(ns)});"
                   f" pending events {ns['pending_events']}, batches {ns['pending_batches']}")
        if ns["authors_count"] > 1:
            shown = ns["authors"][:STATS_AUTHORS_SHOWN]
            more = ns["authors_count"] - len(shown)
            click.echo(f"  by author ({ns['authors_count']}): "
                       + ", ".join(f"{a['author']} {a['records']}" for a in shown)
                       + (f", and {more} more" if more else ""))
    if len(result["actors"]) > 1:
        click.echo("by actor:")
        for actor in result["actors"]:
            click.echo(f"  {actor['actor']}: events {actor['events']}, records"
                       f" {actor['records']}")


@click.command(name="search")
@click.argument("query")
@scope_options
@click.option("--limit", type=click.IntRange(1, 100), default=None,
              help="How many records (default: retrieval.limit).")
@click.option("--mode", type=click.Choice(MODES), default=None,
              help="Words (FTS5), meaning (embeddings) or both fused (default: retrieval.mode;"
                   " lexical when embeddings are off).")
@click.option("--type", "types", multiple=True, type=click.Choice(contract.OBSERVATION_TYPES),
              help="Only records of this type (repeat it for several).")
@click.option("--file", "files", multiple=True, metavar="PATH",
              help="A file the session has touched (repeat it for several): the memories"
                   " of the files in play rank higher, as in a session.")
@click.option("--opened", multiple=True, metavar="PATH",
              help="Instead, what the agent is given when it first opens PATH (repeat it"
                   " for several) while working on QUERY.")
@click.option("--json", "as_json", is_flag=True,
              help="The records with their scores, the terms searched and the latency.")
def search_(query: str, namespace: str | None, project: str | None, limit: int | None,
            mode: str | None, types: tuple[str, ...], files: tuple[str, ...],
            opened: tuple[str, ...], as_json: bool) -> None:
    """Print the context an agent would get for QUERY in this project.

    The search runs in the daemon, exactly as for a prompt (same terms, budget and
    format, the files the git working tree has changed ranked as files in play, and,
    in a project, the memories from outside any project that are close in meaning to
    it). Without --namespace or --project, the project is the one the current
    directory belongs to.

    \b
    Examples:
        kirolearn search "why does the migration fail"
        kirolearn search pagination --project ~/code/app --json
        kirolearn search "retry policy" --type decision --type pattern
        kirolearn search "retry policy" --opened src/client.py
    """
    loaded = settings()
    if not contract.is_text(query):
        raise click.UsageError("QUERY is not valid text in this terminal's encoding")
    if namespace is None and project is None:
        project = os.getcwd()
    namespace = namespace_of(namespace, project)
    require_served()
    body = {"query": query, "namespace": namespace,
            "limit": limit or (FILE_LIMIT if opened else loaded["retrieval"]["limit"]),
            "records": as_json}
    here = None if project is None else kl_project.resolve_project(project)
    root = here.checkout if here is not None else None  # the files are named from it
    if root is not None:  # its records are checked against it, as a hook's are
        body["checkout"] = root

    def named(paths: tuple[str, ...]) -> list[str]:  # as the project names them
        return list(dict.fromkeys(tooluse.relative(os.path.abspath(p), root) for p in paths))

    if opened:
        body.update(opened=named(opened))
    else:
        in_play = named(files) + list(worktree.read(root)[0] if root else ())
        if in_play:
            body["files"] = list(dict.fromkeys(in_play))
        everywhere = None if here is None else kl_project.also_searched(
            here, kl_project.actor_id())
        if everywhere is not None:  # as a hook there asks
            body["global_namespace"] = everywhere
    if mode:
        body["mode"] = mode
    if types:
        body["types"] = list(types)
    result = daemon_search(body, loaded)
    if as_json:
        result.pop("context")
        click.echo(json.dumps({"query": query, "namespace": namespace, **result},
                              ensure_ascii=False))
        return
    for gone in result.get("left_out", []):
        click.echo(f"left out {gone['record_id']} ({gone['title']}): {gone['why']}",
                   err=True)
    if result["context"]:
        click.echo(result["context"])
    else:
        click.echo(f"no memories matched ({result['outcome']},"
                   f" {result['latency_ms']:.1f} ms)", err=True)


DURATION_UNITS = {"d": 86400, "h": 3600}


@click.command(name="brief")
@scope_options
@click.option("--tokens", type=click.IntRange(50, 100_000), default=None, metavar="N",
              help="Its size, in tokens of about four characters (default:"
                   " retrieval.brief_tokens, at least 300).")
@click.option("--json", "as_json", is_flag=True, help="With the ids of the records it names.")
def brief(namespace: str | None, project: str | None, tokens: int | None,
          as_json: bool) -> None:
    """Print the project's brief as markdown: what it is, the conventions and decisions
    in force, the files most worked on and why, open work and recent changes, made from
    its memories (an agent starting a session is given it too).

    \b
    Examples:
        kirolearn brief
        kirolearn brief --project ~/code/app --tokens 800
    """
    if namespace is None and project is None:
        project = os.getcwd()
    namespace = namespace_of(namespace, project)
    require_served()
    body: dict = {"namespace": namespace}
    if tokens is not None:
        body["tokens"] = tokens
    reply = ask("retrieval", "brief", body, "the brief", control.LOOKUP_MS)
    if as_json:
        click.echo(json.dumps(reply, indent=2, ensure_ascii=False))
    elif reply["brief"]:
        click.echo(reply["brief"])
    else:
        click.echo(f"no memories of this project yet ({namespace})", err=True)


def parse_age(text: str) -> float:
    """``90d`` or ``12h`` as seconds (a UsageError otherwise)."""
    unit = DURATION_UNITS.get(text[-1:].lower())
    try:
        amount = float(text[:-1])
    except ValueError:
        amount = -1.0
    if unit is None or not 0 < amount < 100_000:
        raise click.UsageError(f"--events-older-than: give days or hours, such as 90d or 12h;"
                               f" got {text!r}")
    return amount * unit


@click.command()
@click.option("--events-older-than", "age", required=True,
              help="Remove events older than this (90d, 12h).")
@scope_options
@click.option("--yes", is_flag=True, help="Do not ask first.")
def prune(age: str, namespace: str | None, project: str | None, yes: bool) -> None:
    """Remove raw events older than an age, once distilled into records (the records
    stay; events still waiting for extraction stay too), and give the space back to
    the disk. Off unless run.

    \b
    Example:
        kirolearn prune --events-older-than 90d --project ~/code/app
    """
    seconds = parse_age(age)
    namespace = namespace_of(namespace, project)
    require_running()
    where = f"in {namespace}" if namespace else "in every project"
    if not yes:
        click.confirm(f"Remove the distilled events older than {age} {where}?", abort=True)
    before_ms = int((time.time() - seconds) * 1000)
    removed = ask("ingest", "prune_events", {"before_ms": before_ms, "namespace": namespace},
                  "pruning", protocol.MAINTENANCE_MS)
    mib = 1024 * 1024
    click.echo(f"removed {removed['events']} event(s) {where}; the database went from"
               f" {removed['bytes_before'] / mib:.1f} MiB to {removed['bytes_after'] / mib:.1f}"
               " MiB")


@click.command()
@click.option("--dry-run", is_flag=True, help="Count what would be redacted; change nothing.")
def scrub(dry_run: bool) -> None:
    """Run today's secret and <private> rules over everything stored, and redact what
    slipped through in place: events, memory records and their earlier versions, the
    full-text index, the text vectors are made from, the retrieval log, and the
    spooled and quarantined files. Prints what was redacted, by table and kind, so an
    update to the rules protects old data too.

    \b
    Example:
        kirolearn scrub --dry-run && kirolearn scrub
    """
    require_running()
    redacted = ask("ingest", "scrub", {"dry_run": dry_run}, "scrubbing",
                   protocol.MAINTENANCE_MS)["redacted"]
    home = common.home()
    for place, directory in (("spool", home.spool_dir), ("quarantine", home.quarantine_dir)):
        counts = _scrub_files(directory, dry_run)
        if counts:
            redacted[place] = dict(counts)
    verb = "would redact" if dry_run else "redacted"
    total = sum(sum(kinds.values()) for kinds in redacted.values())
    click.echo(f"{verb} {total} secret(s)" + (":" if total else "; nothing was found"))
    for place, kinds in redacted.items():
        listed = ", ".join(f"{kind} {count}" for kind, count in sorted(kinds.items()))
        click.echo(f"  {place}: {listed}")


def _scrub_files(directory: Path, dry_run: bool) -> Counter:
    """Scrub the JSON (an event) or JSON Lines (import lines) files in a folder in place;
    what was redacted, by kind."""
    counts: Counter = Counter()
    for path in sorted(directory.glob("*")) if directory.is_dir() else []:
        if not path.is_file() or path.name.startswith("."):
            continue
        text = path.read_text("utf-8", "replace")
        lines = text.splitlines(keepends=True) if path.suffix == ".jsonl" else [text]
        clean = []
        for line in lines:
            try:
                item = json.loads(line)
            except ValueError:
                clean.append(privacy.scrub(line, counts))
                continue
            item = (privacy.scrub_event(item, counts) if isinstance(item, dict) and "body" in item
                    else privacy.scrub(item, counts))
            clean.append(json.dumps(item, ensure_ascii=False)
                         + ("\n" if line.endswith("\n") else ""))
        if not dry_run and "".join(clean) != text:
            paths.write_private(path, "".join(clean).encode("utf-8"), durable=True)
    return counts


COMMANDS = [import_, export, stats, search_, brief, prune, scrub]
