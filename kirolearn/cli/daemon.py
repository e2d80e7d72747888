"""Commands that run the daemon: start, stop, restart, status, scale, logs, worker, open."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import click

from kirolearn import __version__, capture, config, control, keys, paths, project, transport
from kirolearn.cli import common
from kirolearn.cli.common import require_running, settings
from kirolearn.supervisor.states import EXIT_NOT_RUNNING, READY, START_ORDER


def print_status(status: dict) -> None:
    click.echo(f"kirolearn {__version__} running (supervisor pid {status['pid']},"
               f" home {status['home']})")
    click.echo(f"{'NAME':<16}{'STATE':<10}{'PID':>8}{'UPTIME':>10}{'RESTARTS':>10}")
    for r in status["roles"]:
        pid = r["pid"] or "-"
        click.echo(f"{r['name']:<16}{r['state']:<10}{pid!s:>8}{r['uptime_s']:>9.1f}s"
                   f"{r['restarts']:>10}")


@click.command()
@click.option("--foreground", is_flag=True, help="Run in this terminal instead of detaching.")
@click.option("--extraction-workers", type=click.IntRange(0, config.MAX_WORKERS), default=None,
              help="Extraction worker processes (default: extraction.workers; 0: only"
                   " workers elsewhere extract).")
@click.option("--listen", default=None, metavar="tcp://HOST:PORT",
              help="Also serve other machines there, with CURVE (default: network.listen;"
                   " needs `kirolearn keys init`).")
@click.option("--storage", default=None, metavar="postgresql://USER@HOST:PORT/DB",
              help="Store memory in this PostgreSQL database from now on (sets storage.url;"
                   " empty: the SQLite file in the home again).")
def start(foreground: bool, extraction_workers: int | None, listen: str | None,
          storage: str | None) -> None:
    """Start the daemon and wait until every role is RUNNING (the viewer WAITING for
    its first visit). Exit 1 if one is not, or
    if the database cannot be written (it keeps running, to say why and take the events
    once that is fixed).

    \b
    Examples:
        kirolearn start --extraction-workers 2
        kirolearn start --listen tcp://0.0.0.0:5555
        kirolearn start --storage postgresql://kirolearn@db.internal:5432/kirolearn
    """
    if listen is not None:
        os.environ["KIROLEARN_NETWORK_LISTEN"] = listen  # for the processes it starts
    if storage is not None:  # kept in config.toml: the CLI's reads and later starts use it
        try:
            config.remember("storage", "url", storage, common.home())
        except config.ConfigError as exc:
            raise click.ClickException(str(exc)) from exc
    loaded = settings()
    workers = (loaded["extraction"]["workers"] if extraction_workers is None
               else extraction_workers)
    common.home().ensure_layout()
    if loaded["network"]["listen"]:
        try:
            keys.server_pair(common.home())
        except keys.KeysError as exc:
            raise click.ClickException(str(exc)) from exc
    try:
        elsewhere = control.remote(common.home())
    except control.BadRemote:
        elsewhere = None  # starting a daemon here is what is asked
    if elsewhere is not None:
        raise click.ClickException(f"this machine is a client of {elsewhere.endpoint};"
                                   " `kirolearn connect --off` first to run a daemon here")
    if control.running(common.home()):
        raise click.ClickException(
            f"kirolearn is already running (pid {control.read_pid(common.home().pidfile())})")
    if foreground:
        from kirolearn.supervisor.__main__ import run_daemon

        sys.exit(run_daemon(workers, foreground=True))
    try:
        status = control.wait_ready(common.home(), control.spawn(common.home(), workers=workers))
    except control.StartFailed as exc:
        raise click.ClickException(str(exc)) from exc
    if not status or any(r["state"] not in READY for r in status["roles"]):
        if status:
            print_status(status)
        raise click.ClickException(
            f"not every role reached RUNNING; see the logs in {common.home().log_dir}")
    print_status(status)
    try:
        fault = control.storage_fault(common.home())
    except control.Unanswered:
        fault = None  # every role is RUNNING: a late ping is no fault
    if fault:
        raise click.ClickException(f"started, but storage cannot write: {fault['reason']}")


@click.command()
def stop() -> None:
    """Stop the daemon: extraction, ingest, retrieval, then storage after it drains.

    \b
    Example:
        kirolearn stop
    """
    click.echo("kirolearn stopped" if control.stop(common.home()) else "kirolearn is not running")


@click.command()
@click.option("--extraction-workers", type=click.IntRange(0, config.MAX_WORKERS), default=None)
@click.option("--listen", default=None, metavar="tcp://HOST:PORT")
@click.option("--storage", default=None, metavar="postgresql://USER@HOST:PORT/DB")
@click.pass_context
def restart(ctx: click.Context, extraction_workers: int | None, listen: str | None,
            storage: str | None) -> None:
    """Stop the daemon if it runs, then start it.

    \b
    Example:
        kirolearn restart --extraction-workers 2
    """
    control.stop(common.home())
    ctx.invoke(start, foreground=False, extraction_workers=extraction_workers, listen=listen,
               storage=storage)


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def status(as_json: bool) -> None:
    """Each role process (pid, state, uptime, restarts), the extraction workers (busy or
    idle, batches done, model budget and breakers), what waits for extraction, per
    project, and the batches extraction gave up on, with why. Exit 3 when not running.

    \b
    Examples:
        kirolearn status
        kirolearn status --json
    """
    broken = None
    try:
        strategy = settings()["extraction"]["strategy"]
    except click.ClickException as exc:  # the file changed since start and is broken now
        strategy, broken = "unknown", exc.message
    result = control.status(common.home(), strategy=strategy)
    if result is None:
        if as_json:
            click.echo(json.dumps({"running": False, "roles": [], "settings_error": broken}))
        else:
            click.echo("kirolearn is not running" + (f"; it cannot start: {broken}"
                                                     if broken else ""))
        sys.exit(EXIT_NOT_RUNNING)
    if as_json:
        click.echo(json.dumps(result))
        return
    print_status(result)
    off = capture.describe(common.home())
    if off:
        click.echo(f"capture: {off}")
    if broken:
        click.echo(f"the settings were broken since it started: {broken}")
    if result["fault"]:
        click.echo(f"FAULT since {result['fault']['since']}: storage cannot write:"
                   f" {result['fault']['reason']}")
    click.echo(_extraction_line(result["extraction"]))
    click.echo(_embeddings_line(result["embeddings"]))
    click.echo(f"viewer: {result['viewer']} (kirolearn open)" if result["viewer"]
               else "viewer: not up (see: kirolearn logs viewer)")
    _print_pending(result["pending"])


def _extraction_line(ext: dict) -> str:
    """The workers, how many are busy, batches done, the model's budget and breakers."""
    busy = sum(w["busy"] for w in ext["workers"])
    line = (f"extraction ({ext['strategy']}): {len(ext['workers'])} worker(s), {busy} busy;"
            f" {sum(w.get('batches_done', 0) for w in ext['workers'])} batch(es) done")
    budgets = [w["llm_budget_left"] for w in ext["workers"] if "llm_budget_left" in w]
    if budgets:
        line += (f"; model budget left this hour: {sum(b['calls'] for b in budgets)} calls,"
                 f" {sum(b['tokens'] for b in budgets)} tokens")
    breakers = sorted({ns for w in ext["workers"] for ns in w.get("breakers_open", [])})
    if breakers:
        line += f"; breakers open for {', '.join(breakers)}"
    return line


def _embeddings_line(emb: dict | None) -> str:
    if emb is None:
        return "embeddings: unknown (retrieval does not answer)"
    line = f"embeddings {emb['embeddings']}; search mode {emb['mode']}"
    if "model" in emb:
        line += f"; model {emb['model']}"
    if "unembedded" in emb:
        line += f"; {emb['embedded']} embedded, {emb['unembedded']} waiting"
    return line


def _print_pending(pending: dict | None) -> None:
    """What waits for extraction, per project, and the batches it gave up on."""
    if pending is None:
        click.echo("waiting for extraction: unknown (the database cannot be read)")
        return
    click.echo(f"waiting for extraction: {pending['events']} event(s),"
               f" {pending['batches']} batch(es)")
    for ns in pending["namespaces"]:
        click.echo(f"  {ns['namespace']}: {ns['pending_events']} event(s),"
                   f" {ns['pending_batches']} batch(es)")
    if pending["failed"]:
        click.echo(f"failed batches: {len(pending['failed'])} (their events stay stored;"
                   " after fixing the cause run: kirolearn extraction retry)")
        for batch in pending["failed"]:
            click.echo(f"  {batch['batch_id']} {batch['namespace']}: {batch['events']}"
                       f" event(s): {batch['error']}")


@click.command()
@click.argument("role", type=click.Choice(["extraction"]))
@click.argument("count", type=click.IntRange(0, config.MAX_WORKERS))
def scale(role: str, count: int) -> None:
    """Change the number of extraction workers while running.

    \b
    Example:
        kirolearn scale extraction 4
    """
    require_running()
    control.call("supervisor.ctl", "scale", {"role": role, "count": count}, home=common.home())
    click.echo(f"{role}: {count} worker(s)")


@click.command()
@click.argument("role", required=False, type=click.Choice(["supervisor", *START_ORDER]))
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines.")
@click.option("-n", "--lines", default=50, show_default=True, help="Lines of history per log.")
def logs(role: str | None, follow: bool, lines: int) -> None:
    """Show the daemon's logs (all roles, or one).

    \b
    Example:
        kirolearn logs storage -f
    """
    files = [common.home().log_dir / f"{name}.log" for name in ([role] if role
                                                          else ["supervisor", *START_ORDER])]
    prefix = (lambda path: "") if role else (lambda path: f"{path.stem}: ")
    positions: dict[Path, int] = {}
    for path in files:
        if not path.exists():
            continue
        text = path.read_text("utf-8", errors="replace").splitlines()
        for line in text[-lines:] if lines else []:
            click.echo(prefix(path) + line)
        positions[path] = path.stat().st_size
    while follow:
        time.sleep(0.2)
        for path in files:
            if not path.exists():
                continue
            size = path.stat().st_size
            start_at = positions.get(path, 0)
            if size < start_at:  # rotated
                start_at = 0
            if size > start_at:
                with path.open("rb") as handle:
                    handle.seek(start_at)
                    chunk = handle.read().decode("utf-8", errors="replace")
                for line in chunk.splitlines():
                    click.echo(prefix(path) + line)
                positions[path] = size


@click.group()
def worker() -> None:
    """Run a worker in this terminal, attached to a running daemon: this machine's, or
    one elsewhere over TCP.

    \b
    Examples:
        kirolearn worker extraction
        kirolearn worker extraction --connect tcp://memory.internal:5555
    """


@worker.command(name="extraction")
@click.option("--connect", "daemon", default=None, metavar="HOME | tcp://HOST:PORT",
              help="The daemon: its KIROLEARN_HOME on this machine (default: this one), or"
                   " its address elsewhere.")
@click.option("--server-key", default=None,
              help="The daemon's public key, for tcp:// (default: the one `kirolearn"
                   " connect` saved).")
def worker_extraction(daemon: str | None, server_key: str | None) -> None:
    """Take extraction batches from a running daemon beside its own workers, with this
    machine's extraction settings (e.g. its model).

    Batches are leased, so stopping this worker (Ctrl-C) loses nothing: a batch it
    had not returned is handed out again. Over TCP this machine's worker key (made
    here at the first use; the daemon's host allows it with `kirolearn keys add
    --worker`) authenticates it, and its batches come and go encrypted.

    \b
    Examples:
        kirolearn worker extraction --connect /srv/kirolearn
        kirolearn worker extraction --connect tcp://10.0.0.5:5555 --server-key "$KEY"
    """
    from kirolearn.roles import base
    from kirolearn.roles.extraction import ExtractionWorker

    elsewhere = None
    if daemon and daemon.startswith("tcp://"):
        home = common.home().ensure_layout()
        elsewhere = _daemon_elsewhere(daemon, server_key)
    else:
        home = paths.Home(Path(daemon).resolve()) if daemon else common.home()
        if not control.running(home):
            raise click.ClickException(f"no kirolearn daemon is running in {home.root}")
    try:
        loaded = config.load(home)
    except config.ConfigError as exc:
        raise click.ClickException(f"configuration error: {exc}") from exc
    name = f"worker-{os.getpid()}"
    base.setup_logging(name, loaded["logging"]["level"])
    sys.exit(ExtractionWorker(name, home, loaded, elsewhere).run(standalone=True))


def _daemon_elsewhere(address: str, server_key: str | None) -> control.Remote:
    """The daemon at ``address``, with this machine's client pair (made if need be),
    once it answers; a ClickException saying what to do when it does not."""
    try:
        transport.tcp_endpoints(address)
        if server_key is None:
            saved = control.remote(common.home())
            if saved is None:
                raise click.UsageError("give the daemon's public key: --server-key KEY")
            key = saved.curve.server_key
        else:
            key = keys.check_public_key(server_key)
    except (ValueError, control.BadRemote) as exc:
        raise click.UsageError(str(exc)) from exc
    pair = keys.client_pair(common.home(), create=True, kind=keys.WORKER)
    found = control.Remote(address, transport.Curve(pair.public, pair.secret, key))
    with transport.Client(address, timeout_ms=control.LOOKUP_MS, curve=found.curve,
                          to="ingest") as client:
        try:
            client.call("ping")
        except control.Unanswered as exc:
            raise click.ClickException(
                f"{address} does not answer ({exc}). Is the daemon listening there, and is"
                f" this machine allowed? On its host: kirolearn keys add --worker --"
                f" {project.user()}-worker"
                f" '{pair.public.decode()}'") from exc
    return found


@click.command(name="open")
@click.option("--url", "url_only", is_flag=True,
              help="Print the URL (with the token) instead of opening a browser.")
def open_(url_only: bool) -> None:
    """Open the viewer in a browser: what was captured, the memories, and what each
    prompt was given. The URL carries the viewer's token; the browser keeps it as a
    cookie.

    \b
    Examples:
        kirolearn open
        kirolearn open --url     # e.g. to open it in another browser
    """
    require_running()
    url = control.viewer_url(common.home())
    if url is None:
        raise click.ClickException("the viewer is not up; see: kirolearn logs viewer")
    if url_only:
        click.echo(url)
        return
    import webbrowser

    click.echo(f"opening {url.split('?', 1)[0]}")
    if not webbrowser.open(url):
        click.echo(f"no browser found here; open this URL: {url}")


COMMANDS = [start, stop, restart, status, scale, logs, worker, open_]
