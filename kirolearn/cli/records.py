"""Correcting what is remembered: forget records (or a whole project), edit one."""

from __future__ import annotations

import os

import click

from kirolearn import contract, protocol, spool
from kirolearn.cli import common
from kirolearn.cli.common import (
    ask,
    daemon_search,
    namespace_of,
    reader,
    require_running,
    scope_options,
    settings,
)
from kirolearn.db import reads

MAX_MATCHES = 100  # the most one search returns (the retrieval role's limit)


@click.command()
@click.argument("record_ids", nargs=-1)
@click.option("--query", default=None, help="Forget the records this search finds.")
@click.option("--limit", type=click.IntRange(1, MAX_MATCHES), default=None,
              help="With --query: how many of its best matches (default: retrieval.limit).")
@click.option("--all-matches", is_flag=True,
              help="With --query: every record it finds, searching again until none is left.")
@scope_options
@click.option("--all", "everything", is_flag=True,
              help="With --project or --namespace: every event and record of that project.")
@click.option("--yes", is_flag=True, help="Do not ask first.")
def forget(record_ids: tuple[str, ...], query: str | None, limit: int | None,
           all_matches: bool, namespace: str | None, project: str | None, everything: bool,
           yes: bool) -> None:
    """Delete memory records for good: by id, those a search finds (in this directory's
    project, or the one named), or, with --all, everything captured in one project.
    Shows what it would forget and asks first. The text leaves the database, search,
    the context given to prompts, the retrieval log, the viewer and later exports, with
    earlier versions, vectors and the events it was made from (those no other record
    was made from); only each record's id is kept, so that no import brings it back.
    A search stops at its limit and says so: --limit N or --all-matches for more.

    \b
    Examples:
        kirolearn forget mr_01JD3V8Q1X2Y3Z4A5B6C7D8E9F
        kirolearn forget --query "the old deploy script" --yes
        kirolearn forget --query "staging password" --all-matches
        kirolearn forget --project ~/code/client-app --all
    """
    if everything:
        if record_ids or query or not (namespace or project):
            raise click.UsageError("--all goes with --project or --namespace alone")
        _forget_project(namespace_of(namespace, project), yes)
        return
    _check_forget_options(record_ids, query, limit, all_matches, namespace or project)
    require_running()
    if not query:
        records = _by_id(record_ids, "nothing was forgotten")
        _show_and_forget(records, yes)
        return
    if not contract.is_text(query):
        raise click.UsageError("--query is not valid text in this terminal's encoding")
    if namespace is None and project is None:
        project = os.getcwd()
    _forget_matches(query, namespace_of(namespace, project), limit, all_matches, yes)


def _check_forget_options(record_ids: tuple[str, ...], query: str | None, limit: int | None,
                          all_matches: bool, scoped: str | None) -> None:
    if bool(record_ids) == bool(query):
        raise click.UsageError("give RECORD_IDS or --query (or --project DIR --all),"
                               " not several and not none")
    if record_ids and scoped:
        raise click.UsageError("--namespace and --project go with --query or --all; an id"
                               " is enough")
    if (limit or all_matches) and not query:
        raise click.UsageError("--limit and --all-matches go with --query")
    if limit and all_matches:
        raise click.UsageError("give --limit or --all-matches, not both")


def _forget_matches(query: str, namespace: str, limit: int | None, all_matches: bool,
                    yes: bool) -> None:
    """Forget what a search finds: its best matches, or (``all_matches``) every record it
    finds, searching again until none is left."""
    loaded = settings()
    asked = {"query": query, "namespace": namespace, "records": True,
             "limit": MAX_MATCHES if all_matches else limit or loaded["retrieval"]["limit"]}
    records = daemon_search(asked, loaded)["records"]
    if not records:
        click.echo("no memories matched; nothing was forgotten")
        return
    forgotten: set[str] = set()
    while records:
        if len(records) == asked["limit"] and not all_matches:
            click.echo(f"(the search stopped at its limit of {asked['limit']}: more may match;"
                       f" --limit up to {MAX_MATCHES}, or --all-matches, forgets more)")
        forgotten |= _show_and_forget(records, yes)
        if not all_matches:
            return
        records = [r for r in daemon_search(asked, loaded)["records"]
                   if r["record_id"] not in forgotten]
    click.echo(f"no more memories match; {len(forgotten)} forgotten")


def _show_and_forget(records: list[dict], yes: bool) -> set[str]:
    """List the records, ask (unless ``yes``), forget them; the ids asked to forget."""
    for record in records:
        click.echo(f"{record['record_id']}  {record['title']}")
    if not yes:
        click.confirm(f"Forget these {len(records)} record(s)?", abort=True)
    for record in records:
        reply = ask("ingest", "forget", {"record_id": record["record_id"],
                                         "namespaces": [record["namespace"]]},
                    f"forgetting {record['record_id']}")
        click.echo(f"forgot {record['record_id']}" if reply["deleted"]
                   else f"{record['record_id']} was already gone")
    return {record["record_id"] for record in records}


def _forget_project(namespace: str, yes: bool) -> None:
    if not contract.is_namespace(namespace):
        raise click.UsageError(f"not a namespace (/actor/<user>/project/<id>/): {namespace}")
    require_running()
    with reader() as conn:
        found = reads.stats(conn, namespace)["totals"]
    if not found["events"] and not found["records"] and not spool.waiting(common.home()):
        click.echo(f"nothing is stored for {namespace}; nothing was forgotten")
        return
    click.echo(f"{namespace}: {found['events']} event(s) and {found['records']} record(s)")
    if not yes:
        click.confirm("Forget everything captured in this project?", abort=True)
    spool.discard(namespace, common.home())  # not stored after the forget, by ingest's next drain
    removed = ask("ingest", "forget_project", {"namespace": namespace},
                  f"forgetting {namespace}", protocol.MAINTENANCE_MS)
    click.echo(f"forgot {removed['events']} event(s) and {removed['records']} record(s)"
               f" of {namespace}")


def _by_id(record_ids: tuple[str, ...], unchanged: str) -> list[dict]:
    """The records, in any project; every id must be one (``unchanged`` says what the
    error left alone)."""
    bad = [i for i in record_ids if not contract.is_record_id(i)]
    if bad:
        raise click.UsageError(f"not a record id (mr_ and a ULID): {', '.join(bad)}")
    with reader() as conn:
        found = {i: reads.record_by_id(conn, i) for i in dict.fromkeys(record_ids)}
    unknown = [i for i, record in found.items() if record is None]
    if unknown:
        raise click.ClickException(f"no record {', '.join(unknown)}; {unchanged}")
    return list(found.values())


EDIT_HELP = """\
Edit this memory record ({record_id}), then save and close. Text above [title] is
left out; [facts] are one per line, each starting with "- ". Leave it as it is to
change nothing.
"""
SECTIONS = ("title", "summary", "facts")


def edit_text(record: dict) -> str:
    facts = "\n".join(f"- {fact}" for fact in record["facts"])
    return (EDIT_HELP.format(record_id=record["record_id"])
            + f"\n[title]\n{record['title']}\n\n[summary]\n{record['summary']}\n\n"
            f"[facts]\n{facts}\n")


def parse_edit(text: str) -> dict:
    """The title, summary and facts written in ``edit_text``'s form (UsageError when a
    section is missing)."""
    found: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        name = line.strip()[1:-1] if line.strip().startswith("[") else None
        if name in SECTIONS and line.strip() == f"[{name}]":
            current = found.setdefault(name, [])
        elif current is not None:
            current.append(line)
    missing = [name for name in SECTIONS if name not in found]
    if missing:
        raise click.UsageError(f"the edited text has no [{'], ['.join(missing)}] section;"
                               " nothing was changed")
    facts = [line.strip()[2:].strip() for line in found["facts"]
             if line.strip().startswith("- ") and line.strip()[2:].strip()]
    return {"title": " ".join("\n".join(found["title"]).split()),
            "summary": "\n".join(found["summary"]).strip(), "facts": facts}


@click.command()
@click.argument("record_id")
@click.option("--title", default=None, help="The new title.")
@click.option("--summary", default=None, help="The new summary.")
@click.option("--fact", "facts", multiple=True, help="A fact (repeat it; replaces them all).")
@click.option("--invalid", "invalid_reason", default=None, metavar="REASON",
              help="Mark the record invalid, saying why: it is kept but never retrieved.")
@click.option("--reason", default=None, help="Why it was changed (kept with the old version).")
def edit(record_id: str, title: str | None, summary: str | None, facts: tuple[str, ...],
         invalid_reason: str | None, reason: str | None) -> None:
    """Correct a memory record: its title, summary or facts, in your $EDITOR or with
    the options. The record keeps its id; what it said before is kept as a version
    (kirolearn export shows them). --invalid marks a wrong record instead of deleting it.

    \b
    Examples:
        kirolearn edit mr_01JD3V8Q1X2Y3Z4A5B6C7D8E9F
        kirolearn edit mr_01JD3V8Q1X2Y3Z4A5B6C7D8E9F --title "Deploy through CI" --reason "moved"
        kirolearn edit mr_01JD3V8Q1X2Y3Z4A5B6C7D8E9F --invalid "the cache was removed in 2.0"
    """
    edits = {k: v for k, v in (("title", title), ("summary", summary)) if v is not None}
    if facts:
        edits["facts"] = list(facts)
    if invalid_reason is not None and edits:
        raise click.UsageError("--invalid marks the record as it is; give it without edits")
    require_running()
    [record] = _by_id((record_id,), "nothing was changed")
    if invalid_reason is not None:
        changes: dict = {"invalid_reason": invalid_reason}
    elif edits:
        changes = edits
    else:
        written = click.edit(edit_text(record), extension=".md")
        new = parse_edit(written) if written is not None else None
        changes = {k: v for k, v in (new or {}).items() if v != record[k]}
        if not changes:
            click.echo(f"nothing changed in {record_id}")
            return
    body = {"record_id": record_id, "namespaces": [record["namespace"]], "changes": changes}
    if reason is not None:
        body["reason"] = reason
    reply = ask("ingest", "update_record", body, f"editing {record_id}")
    if not reply["updated"]:
        raise click.ClickException(f"{record_id} was forgotten meanwhile; nothing was changed")
    if invalid_reason is not None:
        click.echo(f"marked {record_id} invalid; it is no longer retrieved")
    else:
        click.echo(f"edited {record_id} ({', '.join(sorted(changes))}); what it said before"
                   " is kept as a version")


COMMANDS = [forget, edit]
