"""Commands over what is stored: import, export, stats, search, forget."""

from __future__ import annotations

import json
import os
import sys

import click

from kirolearn import contract, control, importer
from kirolearn.cli.common import (
    namespace_of,
    reader,
    require_running,
    scope_options,
    settings,
)
from kirolearn.db import reads
from kirolearn.search import MODES


@click.command(name="import")
@click.argument("file", type=click.File("r", encoding="utf-8"))
def import_(file) -> None:
    """Send v1 events (JSON Lines; '-' for stdin) through ingest.

    Reports how many were stored, duplicate or rejected, with the reason for each
    rejected line; the rejected lines are kept in the quarantine folder. Exits 1 if
    any line was rejected.

    \b
    Example:
        kirolearn export > backup.jsonl && kirolearn import backup.jsonl
    """
    require_running()
    try:
        report = importer.import_lines(file)
    except importer.Stalled as exc:
        raise click.ClickException(str(exc)) from exc
    for line_no, reason in sorted(report.rejected):
        click.echo(f"line {line_no}: rejected: {reason}", err=True)
    counts = report.counts
    click.echo(f"stored {counts['stored']}, duplicate {counts['duplicate']},"
               f" rejected {counts['rejected']}")
    if counts["rejected"]:
        click.echo(f"the rejected lines, with their reasons, are in {report.quarantine}",
                   err=True)
        sys.exit(1)


@click.command()
@scope_options
def export(namespace: str | None, project: str | None) -> None:
    """Write events, then memory records, as JSON Lines to stdout.

    \b
    Examples:
        kirolearn export > everything.jsonl
        kirolearn export --project ~/code/app > app.jsonl
    """
    namespace = namespace_of(namespace, project)
    with reader() as conn:
        for event in reads.iter_events(conn, namespace):
            click.echo(json.dumps(event, ensure_ascii=False))
        for record in reads.iter_records(conn, namespace):
            click.echo(json.dumps(record, ensure_ascii=False))


@click.command()
@scope_options
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def stats(namespace: str | None, project: str | None, as_json: bool) -> None:
    """Counts per namespace: events by kind, records, pending extraction work."""
    namespace = namespace_of(namespace, project)
    with reader() as conn:
        result = reads.stats(conn, namespace)
    if as_json:
        click.echo(json.dumps(result))
        return
    t = result["totals"]
    click.echo(f"events {t['events']}, records {t['records']}, pending events"
               f" {t['pending_events']}, pending batches {t['pending_batches']}")
    for ns in result["namespaces"]:
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(ns["events"].items())) or "no events"
        click.echo(f"{ns['namespace']}\n  {kinds}; records {ns['records']};"
                   f" pending events {ns['pending_events']}, batches {ns['pending_batches']}")


@click.command(name="search")
@click.argument("query")
@scope_options
@click.option("--limit", type=click.IntRange(1, 100), default=None,
              help="How many records (default: retrieval.limit).")
@click.option("--mode", type=click.Choice(MODES), default=None,
              help="Words (FTS5), meaning (embeddings) or both fused (default: retrieval.mode;"
                   " lexical when embeddings are off).")
@click.option("--json", "as_json", is_flag=True,
              help="The records with their scores, the terms searched and the latency.")
def search_(query: str, namespace: str | None, project: str | None, limit: int | None,
            mode: str | None, as_json: bool) -> None:
    """Print the context an agent would get for QUERY in this project.

    The search runs in the daemon, exactly as for a prompt (same terms, budget and
    format). Without --namespace or --project, the project is the one the current
    directory belongs to.

    \b
    Examples:
        kirolearn search "why does the migration fail"
        kirolearn search pagination --project ~/code/app --json
    """
    loaded = settings()
    if not contract.is_text(query):
        raise click.UsageError("QUERY is not valid text in this terminal's encoding")
    if namespace is None and project is None:
        project = os.getcwd()
    namespace = namespace_of(namespace, project)
    require_running()
    body = {"query": query, "namespace": namespace,
            "limit": limit or loaded["retrieval"]["limit"], "records": as_json}
    if mode:
        body["mode"] = mode
    result = _search(body, loaded)
    if as_json:
        result.pop("context")
        click.echo(json.dumps({"query": query, "namespace": namespace, **result},
                              ensure_ascii=False))
        return
    if result["context"]:
        click.echo(result["context"])
    else:
        click.echo(f"no memories matched ({result['outcome']},"
                   f" {result['latency_ms']:.1f} ms)", err=True)


@click.command()
@click.argument("record_ids", nargs=-1)
@click.option("--query", default=None, help="Forget the records this search finds.")
@scope_options
@click.option("--yes", is_flag=True, help="Do not ask first.")
def forget(record_ids: tuple[str, ...], query: str | None, namespace: str | None,
           project: str | None, yes: bool) -> None:
    """Delete memory records for good: by id, or those a search finds (in this
    directory's project, or the one named). Shows what it would forget and asks first.
    The records leave search, the context given to prompts, the viewer and later
    exports, with their earlier versions and vectors; the captured events stay.

    \b
    Examples:
        kirolearn forget mr_01JD3V8Q1X2Y3Z4A5B6C7D8E9F
        kirolearn forget --query "the old deploy script" --yes
    """
    if bool(record_ids) == bool(query):
        raise click.UsageError("give RECORD_IDS or --query, not both and not neither")
    if record_ids and (namespace or project):
        raise click.UsageError("--namespace and --project go with --query; an id is enough")
    require_running()
    if query:
        if not contract.is_text(query):
            raise click.UsageError("--query is not valid text in this terminal's encoding")
        if namespace is None and project is None:
            project = os.getcwd()
        loaded = settings()
        records = _search({"query": query, "namespace": namespace_of(namespace, project),
                           "limit": loaded["retrieval"]["limit"], "records": True},
                          loaded)["records"]
        if not records:
            click.echo("no memories matched; nothing was forgotten")
            return
    else:
        records = _by_id(record_ids)
    for record in records:
        click.echo(f"{record['record_id']}  {record['title']}")
    if not yes:
        click.confirm(f"Forget these {len(records)} record(s)?", abort=True)
    for record in records:
        try:
            reply = control.call("ingest", "forget", {"record_id": record["record_id"],
                                                      "namespaces": [record["namespace"]]},
                                 timeout_ms=control.WRITE_MS)
        except control.Unanswered as exc:
            raise click.ClickException(f"forgetting {record['record_id']} failed: {exc}") from exc
        click.echo(f"forgot {record['record_id']}" if reply["deleted"]
                   else f"{record['record_id']} was already gone")


def _by_id(record_ids: tuple[str, ...]) -> list[dict]:
    """The records, in any project; every id must be one (nothing is forgotten else)."""
    bad = [i for i in record_ids if not contract.is_record_id(i)]
    if bad:
        raise click.UsageError(f"not a record id (mr_ and a ULID): {', '.join(bad)}")
    with reader() as conn:
        found = {i: reads.record_by_id(conn, i) for i in dict.fromkeys(record_ids)}
    unknown = [i for i, record in found.items() if record is None]
    if unknown:
        raise click.ClickException(f"no record {', '.join(unknown)}; nothing was forgotten")
    return list(found.values())


def _search(body: dict, loaded: dict) -> dict:
    """One search in the daemon, exactly as for a prompt (``loaded``: the settings); its
    reply."""
    timeout_ms = int(loaded["retrieval"]["budget_ms"]) + control.SEARCH_MARGIN_MS
    try:
        return control.call("retrieval", "search", body, timeout_ms=timeout_ms)
    except control.Unanswered as exc:
        raise click.ClickException(f"search failed: {exc}") from exc


COMMANDS = [import_, export, stats, search_, forget]
