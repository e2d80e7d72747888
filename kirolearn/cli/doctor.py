"""``kirolearn doctor``: what is wrong, and what to run about it."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from kirolearn import agents as registry
from kirolearn import capture, config, control, db, install, keys, paths, project, spool
from kirolearn.cli import common
from kirolearn.db import errors, schema
from kirolearn.supervisor.states import READY, WAITING

Report = tuple[bool | None, str, str]  # ok (None: a note), what, detail


@click.command()
@click.option("--project", "project_dir", default=None,
              type=click.Path(exists=True, file_okay=False),
              help="The project whose agent configuration to check (default: the current one).")
def doctor(project_dir: str | None) -> None:
    """Check the daemon, its sockets, the database, the spool and each agent's hooks, and
    say what to fix. Exit 1 when something is wrong.

    \b
    Example:
        kirolearn doctor --project ~/code/app
    """
    problems = 0

    def report(ok: bool | None, what: str, detail: str) -> None:
        nonlocal problems
        mark = {True: "ok  ", False: "FAIL", None: "note"}[ok]
        problems += ok is False
        click.echo(f"{mark}  {what}: {detail}")

    try:
        elsewhere = control.remote(common.home())
    except control.BadRemote as exc:
        elsewhere = None
        report(False, "connection", str(exc))
    if elsewhere is not None:
        report(*_check_connection(elsewhere))
    try:
        common.home().runtime_dir()
    except paths.UnsafeRuntimeDir as exc:  # hooks cannot reach a daemon: say why, and stop
        report(False, "sockets", f"{exc}; until then every hook keeps its event in"
               f" {common.home().spool_dir}")
        sys.exit(1)
    for found in _check_daemon(elsewhere):
        report(*found)
    report(*_check_capture())
    if elsewhere is None:
        report(*_check_database())
    report(*_check_spool(elsewhere))
    report(*_check_quarantine())
    for found in _check_agents(project_dir):
        report(*found)
    sys.exit(1 if problems else 0)


def _check_daemon(elsewhere: control.Remote | None) -> list[Report]:
    """Whether the daemon runs here, and if so whether its roles, ingest's socket and
    storage's writes work."""
    running = control.running(common.home())
    found: list[Report] = []
    if elsewhere is None:
        found.append((True if running else None, "daemon",
                      f"running (pid {control.read_pid(common.home().pidfile())})" if running
                      else "not running; the first hook starts it (or: kirolearn start)"))
    if running:
        found += [_check_roles(), _check_ingest(), _check_writes()]
    return found


def _check_roles() -> Report:
    try:
        roles = control.call("supervisor.ctl", "status", home=common.home())["roles"]
    except control.Unanswered as exc:
        return False, "roles", f"the supervisor does not answer ({exc}); run: kirolearn restart"
    bad = [f"{r['name']} {r['state']}" for r in roles if r["state"] not in READY]
    waiting = [r["name"] for r in roles if r["state"] == WAITING]
    return (not bad, "roles", f"{', '.join(bad)}; see: kirolearn logs" if bad else
            "all RUNNING" + (f" ({', '.join(waiting)} WAITING: started on demand)"
                             if waiting else ""))


def _check_ingest() -> Report:
    try:
        control.call("ingest", "ping", home=common.home())
    except control.Unanswered as exc:
        return False, "sockets", f"ingest does not answer ({exc}); run: kirolearn restart"
    return True, "sockets", f"ingest answers on {common.home().endpoint('ingest')}"


def _check_writes() -> Report:
    try:
        fault = control.storage_fault(common.home())
    except control.Unanswered as exc:
        return False, "writes", f"storage does not answer ({exc}); see: kirolearn logs storage"
    return (not fault, "writes", f"storage cannot write: {fault['reason']}; it"
            " retries by itself and takes events again once that is fixed" if fault
            else "storage can write to the database")


def _check_spool(elsewhere: control.Remote | None) -> Report:
    waiting = len(spool.waiting(common.home()))
    if not waiting:
        return True, "spool", "empty"
    return None, "spool", (f"{waiting} event(s) waiting in {common.home().spool_dir}; " + (
        "the next hook that reaches the daemon sends them there" if elsewhere
        else "the daemon stores them within seconds of starting"))


def _check_agents(project_dir: str | None) -> list[Report]:
    """Each agent's hooks, in the project (given, or the current one) and the user's
    settings; a note when no agent has them."""
    scopes: list[tuple[str, Path | None]] = [("user", None)]
    here = Path(project_dir).resolve() if project_dir else None
    if here is None and not project.resolve_project().is_global:
        here = Path(project.resolve_project().root)
    if here is not None:
        scopes.insert(0, (f"project {here}", here))
    found: list[Report] = []
    installed = 0
    for agent in install.AGENTS:
        for scope, target in scopes:
            if registry.AGENTS[agent].project_only and target is None:
                continue
            state, detail = install.check(agent, target, Path.home())
            installed += state != "missing"
            if state != "missing":
                found.append((state == "installed", f"{agent} ({scope})", detail))
            note = install.agent_note(agent, target, Path.home()) \
                if state == "installed" else None
            if note:
                found.append((None, f"{agent} ({scope})", note))
    if not installed:
        found.append((None, "agents", "no agent has kirolearn's hooks here; run: kirolearn"
                      " install --agent " + "|".join(install.AGENTS)))
    return found


def _check_connection(elsewhere: control.Remote) -> Report:
    """Whether the daemon this machine is connected to answers it."""
    try:
        answer = control.call("ingest", "ping", timeout_ms=control.LOOKUP_MS, home=common.home())
    except control.Unanswered as exc:
        pair = keys.client_pair(common.home())
        return False, "connection", (
            f"{elsewhere.endpoint} does not answer ({exc}): is the daemon listening there,"
            " and is this machine allowed? On its host: kirolearn keys add --"
            f" {project.user()}"
            f" '{pair.public.decode() if pair else ''}'")
    user = project.user()
    if answer.get("client") not in (None, user):  # a key is its actor (docs/team.md)
        return False, "connection", (
            f"{elsewhere.endpoint} answers, but this machine's key is allowed as"
            f" {answer['client']} while its user is {user}: every event is refused"
            f" (FORBIDDEN) and kept in the quarantine. Work as {answer['client']}, or on the"
            f" daemon's host: kirolearn keys revoke {answer['client']} && kirolearn keys add"
            f" {user} KEY")
    return True, "connection", (f"{elsewhere.endpoint} answers; this machine's memory is"
                                f" there, as {project.actor_id()}")


def _check_quarantine() -> Report:
    """What could not be stored: each spool file and import kept aside, and why."""
    directory = common.home().quarantine_dir
    kept = sorted(p for p in directory.glob("*") if not p.name.endswith(".reason")
                  and not p.name.startswith(".")) if directory.is_dir() else []
    if not kept:
        return True, "quarantine", "empty"
    lines = []
    for path in kept[-10:]:
        reason = path.with_name(path.name + ".reason")
        if reason.exists():
            lines.append(f"  {path.name}: {reason.read_text(encoding='utf-8').strip()}")
        else:
            count = sum(1 for _ in path.open(encoding="utf-8", errors="replace"))
            lines.append(f"  {path.name}: {count} rejected import line(s), each with its reason")
    more = f"\n  … and {len(kept) - 10} more" if len(kept) > 10 else ""
    return None, "quarantine", (f"{len(kept)} item(s) in {directory} could not be stored"
                                " (kept with the reason; fix and re-import, or delete them):\n"
                                + "\n".join(lines) + more)


def _check_capture() -> Report:
    """Whether the hooks capture: a pause or opting in is a note."""
    off = capture.describe(common.home())
    return (None, "capture", off) if off else (True, "capture", "on in every project"
                                                               " (but capture.exclude's)")


def _check_database() -> Report:
    try:
        where = db.location(common.home())
    except config.ConfigError as exc:
        return False, "database", f"where it is cannot be read: {exc}"
    name = db.describe(where)
    if not db.exists(where):
        return None, "database", f"{where} does not exist yet (created when the daemon starts)"
    store = db.dialect(where)
    exposed = store.exposed(where)
    if exposed:
        return False, "database", exposed
    try:
        with db.reading(where) as conn:
            check, applied = schema.check(conn)
    except errors.StoreError as exc:
        return False, "database", f"{name} cannot be read ({exc})"
    if check != "ok":
        return False, "database", f"{name} is damaged ({check}); restore a backup or export/import"
    latest = schema.latest(store.Connection.name)
    if applied != latest:
        return None, "database", (
            f"{name} is at schema {applied}, this kirolearn expects {latest};"
            " it migrates when the daemon starts")
    return True, "database", (f"{name} (schema {applied}, private)" if store.IN_A_FILE
                              else f"{name} ({store.TITLE}, schema {applied})")


COMMANDS = [doctor]
