"""The ``kirolearn`` command."""

from __future__ import annotations

import collections
import concurrent.futures
import json
import logging
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import click
import tenacity
from kirolearn.supervisor.arbiter import (
    FATAL,
    RET_PIDFILE,
    RUNNING,
    START_ORDER,
    read_pid,
    remove_socket_files,
)

from kirolearn import (
    __version__,
    config,
    contract,
    db,
    llm,
    paths,
    project,
    protocol,
    spool,
    transport,
)
from kirolearn import embeddings as embeddings_
from kirolearn import install as install_

READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 60.0
IMPORT_CHUNK = 500
IMPORT_IN_FLIGHT = 3
IMPORT_CHUNK_BYTES = 1024 * 1024  # a chunk of lines stays well under the frame limit
EXIT_NOT_RUNNING = 3  # like LSB's "program is not running"

log = logging.getLogger("kirolearn.cli")


def _settings() -> dict:
    try:
        settings = config.load(paths.home())
        llm.from_settings(settings, log)  # refuse an extraction strategy that cannot work
    except config.ConfigError as exc:
        raise click.ClickException(f"configuration error: {exc}") from exc
    return settings


def _running() -> bool:
    return paths.daemon_running()


def _supervisor(op: str, body: dict | None = None, timeout_ms: int = 2000) -> dict:
    with transport.Client(paths.endpoint("supervisor.ctl"), timeout_ms=timeout_ms) as client:
        return client.call(op, body)


def _wait_until_ready(daemon: subprocess.Popen) -> dict:
    deadline = time.monotonic() + READY_TIMEOUT_S
    status: dict = {}
    while time.monotonic() < deadline:
        code = daemon.poll()
        if code == RET_PIDFILE:
            raise click.ClickException("kirolearn is already running")
        if code is not None:
            raise click.ClickException(
                f"the supervisor exited with status {code}; see {paths.log_dir()}/supervisor.log")
        try:
            status = _supervisor("status", timeout_ms=300)
        except (transport.Timeout, protocol.RemoteError):
            time.sleep(0.05)
            continue
        states = {r["state"] for r in status["roles"]}
        if states == {RUNNING} or FATAL in states:
            return status
        time.sleep(0.05)
    return status


def _print_status(status: dict) -> None:
    click.echo(f"kirolearn {__version__} running (supervisor pid {status['pid']},"
               f" home {status['home']})")
    click.echo(f"{'NAME':<16}{'STATE':<10}{'PID':>8}{'UPTIME':>10}{'RESTARTS':>10}")
    for r in status["roles"]:
        pid = r["pid"] or "-"
        click.echo(f"{r['name']:<16}{r['state']:<10}{pid!s:>8}{r['uptime_s']:>9.1f}s"
                   f"{r['restarts']:>10}")


@click.group()
@click.version_option(__version__, prog_name="kirolearn")
def cli() -> None:
    """Long-term memory for AI coding agents.

    Everything lives under KIROLEARN_HOME (default ~/.kirolearn).
    """


@cli.command()
@click.option("--foreground", is_flag=True, help="Run in this terminal instead of detaching.")
@click.option("--extraction-workers", type=click.IntRange(1, 64), default=None,
              help="Extraction worker processes (default: extraction.workers).")
def start(foreground: bool, extraction_workers: int | None) -> None:
    """Start the daemon and wait until every role is RUNNING.

    \b
    Example:
        kirolearn start --extraction-workers 2
    """
    settings = _settings()
    workers = extraction_workers or settings["extraction"]["workers"]
    paths.ensure_layout()
    if _running():
        raise click.ClickException(
            f"kirolearn is already running (pid {read_pid(paths.pidfile())})")
    if foreground:
        from kirolearn.supervisor.__main__ import run_daemon

        sys.exit(run_daemon(workers, foreground=True))
    with open(paths.log_dir() / "supervisor.out", "ab") as out:
        # cwd: a daemon should not pin the caller's directory, and `python -m` puts the
        # cwd first on sys.path, where a source checkout would shadow the installed code.
        daemon = subprocess.Popen(
            [sys.executable, "-m", "kirolearn.supervisor", "--extraction-workers", str(workers)],
            stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True,
            cwd=paths.home())
    status = _wait_until_ready(daemon)
    if not status or any(r["state"] != RUNNING for r in status["roles"]):
        if status:
            _print_status(status)
        raise click.ClickException(
            f"not every role reached RUNNING; see the logs in {paths.log_dir()}")
    _print_status(status)


def _exited(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    try:  # a zombie has exited: only its parent's wait is missing
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except (OSError, IndexError):
        return False


def _stop() -> bool:
    """Stop the daemon if it runs; returns whether it was running (and is now gone)."""
    pidfile = paths.pidfile()
    if not _running():
        remove_socket_files(paths.runtime_dir())
        return False
    supervisor_pid = read_pid(pidfile)
    try:
        _supervisor("stop")
    except (transport.Timeout, protocol.RemoteError):
        pid = read_pid(pidfile)
        if pid:  # the supervisor is wedged; its roles stop when it goes
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while _running():
        if time.monotonic() > deadline:
            pid = read_pid(pidfile)
            if pid:
                os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 5
        time.sleep(0.05)
    # The lock goes just before the process does; "stopped" means nothing is left.
    deadline = time.monotonic() + 5
    while supervisor_pid and not _exited(supervisor_pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    remove_socket_files(paths.runtime_dir())
    return True


@cli.command()
def stop() -> None:
    """Stop the daemon: extraction, ingest, retrieval, then storage after it drains."""
    click.echo("kirolearn stopped" if _stop() else "kirolearn is not running")


@cli.command()
@click.option("--extraction-workers", type=click.IntRange(1, 64), default=None)
@click.pass_context
def restart(ctx: click.Context, extraction_workers: int | None) -> None:
    """Stop the daemon if it runs, then start it."""
    _stop()
    ctx.invoke(start, foreground=False, extraction_workers=extraction_workers)


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def status(as_json: bool) -> None:
    """Each role process (pid, state, uptime, restarts), the extraction workers (busy or
    idle, batches done, model budget and breakers) and what waits for extraction, per
    project. Exit 3 when not running."""
    try:
        result = _supervisor("status") if _running() else None
    except (transport.Timeout, protocol.RemoteError):
        result = None
    if result is None:
        if as_json:
            click.echo(json.dumps({"running": False, "roles": []}))
        else:
            click.echo("kirolearn is not running")
        sys.exit(EXIT_NOT_RUNNING)
    result["extraction"] = _extraction_status(result)
    result["pending"] = _pending()
    result["embeddings"] = _embeddings_status()
    from kirolearn import viewer

    result["viewer"] = (viewer.read_info(paths.home()) or {}).get("url")
    if as_json:
        click.echo(json.dumps(result))
        return
    _print_status(result)
    ext, pending = result["extraction"], result["pending"]
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
    click.echo(line)
    emb = result["embeddings"]
    if emb is None:
        click.echo("embeddings: unknown (retrieval does not answer)")
    else:
        line = f"embeddings {emb['embeddings']}; search mode {emb['mode']}"
        if "unembedded" in emb:
            line += f"; {emb['embedded']} embedded, {emb['unembedded']} waiting"
        click.echo(line)
    click.echo(f"viewer: {result['viewer']} (kirolearn open)" if result["viewer"]
               else "viewer: not up (see: kirolearn logs viewer)")
    if pending is None:
        click.echo("waiting for extraction: unknown (the database cannot be read)")
        return
    click.echo(f"waiting for extraction: {pending['events']} event(s),"
               f" {pending['batches']} batch(es)")
    for ns in pending["namespaces"]:
        click.echo(f"  {ns['namespace']}: {ns['pending_events']} event(s),"
                   f" {ns['pending_batches']} batch(es)")


def _embeddings_status() -> dict | None:
    """What retrieval says of its embeddings: on (which model) or off (why), the default
    search mode, and the back-fill's progress."""
    try:
        with transport.Client(paths.endpoint("retrieval"), timeout_ms=1000) as client:
            return client.call("embeddings")
    except (transport.Timeout, protocol.RemoteError):
        return None


def _extraction_status(status: dict) -> dict:
    """Each worker's counters; a worker that does not answer at once is busy with a batch
    (it answers between batches)."""
    workers = []
    for r in status["roles"]:
        if r["role"] != "extraction" or r["state"] != RUNNING:
            continue
        try:
            with transport.Client(paths.endpoint(f"{r['name']}.ctl"), timeout_ms=150) as c:
                info = c.call("ping")
        except (transport.Timeout, protocol.RemoteError):
            workers.append({"name": r["name"], "busy": True})
            continue
        keep = ("batches_done", "llm_budget_left", "breakers_open")
        workers.append({"name": r["name"], "busy": False,
                        **{k: info[k] for k in keep if k in info}})
    try:
        strategy = _settings()["extraction"]["strategy"]
    except click.ClickException:  # the file changed since start and is broken now
        strategy = "unknown"
    return {"strategy": strategy, "workers": workers}


def _pending() -> dict | None:
    """Events and batches waiting for extraction, per project with any; None when the
    database cannot be read (status must still report the processes)."""
    try:
        conn = _reader()
        try:
            stats = db.stats(conn)
        finally:
            conn.close()
    except (click.ClickException, sqlite3.Error):
        return None
    return {"events": stats["totals"]["pending_events"],
            "batches": stats["totals"]["pending_batches"],
            "namespaces": [{k: n[k] for k in ("namespace", "pending_events", "pending_batches")}
                           for n in stats["namespaces"]
                           if n["pending_events"] or n["pending_batches"]]}


@cli.command()
@click.argument("role", type=click.Choice(["extraction"]))
@click.argument("count", type=click.IntRange(1, 64))
def scale(role: str, count: int) -> None:
    """Change the number of extraction workers while running.

    \b
    Example:
        kirolearn scale extraction 4
    """
    if not _running():
        raise click.ClickException("kirolearn is not running")
    _supervisor("scale", {"role": role, "count": count})
    click.echo(f"{role}: {count} worker(s)")


def _log_files(role: str | None) -> list[Path]:
    names = [role] if role else ["supervisor", *START_ORDER]
    return [paths.log_dir() / f"{name}.log" for name in names]


@cli.command()
@click.argument("role", required=False, type=click.Choice(["supervisor", *START_ORDER]))
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines.")
@click.option("-n", "--lines", default=50, show_default=True, help="Lines of history per log.")
def logs(role: str | None, follow: bool, lines: int) -> None:
    """Show the daemon's logs (all roles, or one).

    \b
    Example:
        kirolearn logs storage -f
    """
    files = _log_files(role)
    positions: dict[Path, int] = {}
    for path in files:
        if not path.exists():
            continue
        text = path.read_text("utf-8", errors="replace").splitlines()
        prefix = "" if role else f"{path.stem}: "
        for line in text[-lines:] if lines else []:
            click.echo(prefix + line)
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
                prefix = "" if role else f"{path.stem}: "
                for line in chunk.splitlines():
                    click.echo(prefix + line)
                positions[path] = size


def _read_lines(stream) -> Iterator[tuple[int, str]]:
    for number, line in enumerate(stream, start=1):
        if line.strip():
            yield number, line


def _is_record(line: str) -> bool:
    try:
        item = json.loads(line)
    except json.JSONDecodeError:
        return False
    return isinstance(item, dict) and "record_id" in item


def _send_chunk(client: transport.Client, lines: list[str]) -> list[dict]:
    """put_events with retries: a restarted ingest or storage is waited for, and a
    retried chunk's already-stored events come back as duplicates."""
    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_delay(60),
        wait=tenacity.wait_exponential_jitter(initial=0.1, max=2),
        retry=tenacity.retry_if_exception(
            lambda e: isinstance(e, transport.Timeout) or (
                isinstance(e, protocol.RemoteError) and e.code in (
                    protocol.ErrorCode.UNAVAILABLE, protocol.ErrorCode.SHUTTING_DOWN,
                    protocol.ErrorCode.INTERNAL))),
        reraise=True)
    return retrying(client.call, "put_events", {"lines": lines})["results"]


@cli.command(name="import")
@click.argument("file", type=click.File("r", encoding="utf-8"))
def import_(file) -> None:
    """Send v1 events (JSON Lines; '-' for stdin) through ingest.

    Reports how many were stored, duplicate or rejected, with the reason for each
    rejected line. Exits 1 if any line was rejected.

    \b
    Example:
        kirolearn export > backup.jsonl && kirolearn import backup.jsonl
    """
    if not _running():
        raise click.ClickException("kirolearn is not running; start it with 'kirolearn start'")
    counts = {"stored": 0, "duplicate": 0, "rejected": 0}
    rejected: list[tuple[int, str]] = []

    def report(line_no: int, status_: str, reason: str = "") -> None:
        counts[status_] += 1
        if status_ == "rejected":
            rejected.append((line_no, reason))

    local = threading.local()
    clients: list[transport.Client] = []

    def send(lines: list[str]) -> list[dict]:
        if not hasattr(local, "client"):
            local.client = transport.Client(paths.endpoint("ingest"), timeout_ms=3000)
            clients.append(local.client)
        return _send_chunk(local.client, lines)

    # A few chunks in flight at once, so ingest validates one while storage commits another.
    in_flight: collections.deque = collections.deque()

    def collect_oldest() -> None:
        numbers, future = in_flight.popleft()
        try:
            results = future.result()
        except protocol.RemoteError as exc:  # the whole chunk was refused
            results = [{"status": "rejected", "reason": str(exc)}] * len(numbers)
        except transport.Timeout as exc:
            raise click.ClickException(f"ingest stopped answering ({exc}); the lines before"
                                       f" line {numbers[0]} were sent") from exc
        for line_no, result in zip(numbers, results, strict=True):
            report(line_no, result["status"], result.get("reason", ""))

    with concurrent.futures.ThreadPoolExecutor(IMPORT_IN_FLIGHT) as pool:
        chunk: list[str] = []
        numbers: list[int] = []
        chunk_bytes = 0

        def submit() -> None:
            nonlocal chunk, numbers, chunk_bytes
            if chunk:
                in_flight.append((numbers, pool.submit(send, chunk)))
                chunk, numbers, chunk_bytes = [], [], 0
            if len(in_flight) >= IMPORT_IN_FLIGHT:
                collect_oldest()

        for line_no, line in _read_lines(file):
            size = len(line.encode("utf-8"))
            if size > protocol.MAX_FRAME_BYTES // 2:
                report(line_no, "rejected", f"the line is {size} bytes; an event's body may"
                       f" be at most {contract.MAX_BODY_BYTES} bytes")
                continue
            if '"record_id"' in line and _is_record(line):
                report(line_no, "rejected", "a memory record, not an event (records are"
                       " rebuilt by extraction)")
                continue
            if chunk_bytes + size > IMPORT_CHUNK_BYTES:
                submit()  # a large line travels alone rather than overfill a chunk
            chunk.append(line)
            numbers.append(line_no)
            chunk_bytes += size
            if len(chunk) >= IMPORT_CHUNK:
                submit()
        submit()
        while in_flight:
            collect_oldest()
    for client in clients:
        client.close()
    for line_no, reason in sorted(rejected):
        click.echo(f"line {line_no}: rejected: {reason}", err=True)
    click.echo(f"stored {counts['stored']}, duplicate {counts['duplicate']},"
               f" rejected {counts['rejected']}")
    if counts["rejected"]:
        sys.exit(1)


def _reader():
    path = paths.db_path()
    if not path.exists():
        raise click.ClickException(f"no database at {path} yet; start kirolearn first")
    return db.connect_reader(path)


def scope_options(command):
    """--namespace NS or --project DIR (the project DIR belongs to, found the same way
    the agents' hooks find it)."""
    command = click.option("--project", type=click.Path(exists=True, file_okay=False),
                           help="Only the project this directory belongs to.")(command)
    return click.option("--namespace", default=None, help="Only this namespace.")(command)


def _namespace(namespace: str | None, project_dir: str | None) -> str | None:
    if namespace and project_dir:
        raise click.UsageError("give --namespace or --project, not both")
    if project_dir:
        return project.resolve_project(project_dir).namespace(project.actor_id())
    return namespace


@cli.command()
@scope_options
def export(namespace: str | None, project: str | None) -> None:
    """Write events, then memory records, as JSON Lines to stdout.

    \b
    Examples:
        kirolearn export > everything.jsonl
        kirolearn export --project ~/code/app > app.jsonl
    """
    namespace = _namespace(namespace, project)
    conn = _reader()
    try:
        for event in db.iter_events(conn, namespace):
            click.echo(json.dumps(event, ensure_ascii=False))
        for record in db.iter_records(conn, namespace):
            click.echo(json.dumps(record, ensure_ascii=False))
    finally:
        conn.close()


@cli.command()
@scope_options
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def stats(namespace: str | None, project: str | None, as_json: bool) -> None:
    """Counts per namespace: events by kind, records, pending extraction work."""
    namespace = _namespace(namespace, project)
    conn = _reader()
    try:
        result = db.stats(conn, namespace)
    finally:
        conn.close()
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


@cli.command(name="search")
@click.argument("query")
@scope_options
@click.option("--limit", type=click.IntRange(1, 100), default=None,
              help="How many records (default: retrieval.limit).")
@click.option("--mode", type=click.Choice(["lexical", "semantic", "hybrid"]), default=None,
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
    settings = _settings()
    if not contract.is_text(query):
        raise click.UsageError("QUERY is not valid text in this terminal's encoding")
    if namespace is None and project is None:
        project = os.getcwd()
    namespace = _namespace(namespace, project)
    if not _running():
        raise click.ClickException("kirolearn is not running; start it with 'kirolearn start'")
    body = {"query": query, "namespace": namespace,
            "limit": limit or settings["retrieval"]["limit"], "records": as_json}
    if mode:
        body["mode"] = mode
    timeout_ms = int(settings["retrieval"]["budget_ms"]) + 2000
    try:
        with transport.Client(paths.endpoint("retrieval"), timeout_ms=timeout_ms) as client:
            result = client.call("search", body)
    except (transport.Timeout, protocol.RemoteError) as exc:
        raise click.ClickException(f"search failed: {exc}") from exc
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


@cli.command()
@click.option("--scope", type=click.Choice(["project", "global", "project+global"]),
              default=None, help="Which memories it serves (default: mcp.scope).")
def mcp(scope: str | None) -> None:
    """Serve the MCP tools on stdio, for an agent to start (kirolearn install registers
    it): search_memory, recall, timeline, get_records, save_observation,
    save_session_summary and forget, for the project of the current directory.

    \b
    Example (what an agent's configuration runs):
        kirolearn mcp
        kirolearn mcp --scope project+global
    """
    from kirolearn import mcp_server

    try:
        mcp_server.main(scope)
    except config.ConfigError as exc:
        raise click.ClickException(f"configuration error: {exc}") from exc


@cli.command(name="open")
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
    from kirolearn import viewer, web

    if not _running():
        raise click.ClickException("kirolearn is not running; start it with 'kirolearn start'")
    info = viewer.read_info(paths.home())
    token_file = web.token_path(paths.home())
    if info is None or not token_file.exists():
        raise click.ClickException("the viewer is not up; see: kirolearn logs viewer")
    url = f"{info['url']}?token={token_file.read_text('utf-8').strip()}"
    if url_only:
        click.echo(url)
        return
    import webbrowser

    click.echo(f"opening {info['url']}")
    if not webbrowser.open(url):
        click.echo(f"no browser found here; open this URL: {url}")


@cli.group()
def embeddings() -> None:
    """The records' vectors, for semantic and hybrid search."""


@embeddings.command(name="status")
def embeddings_status() -> None:
    """Whether embeddings are on (and which model), and how many records wait for one."""
    if not _running():
        raise click.ClickException("kirolearn is not running; start it with 'kirolearn start'")
    found = _embeddings_status()
    if found is None:
        raise click.ClickException("retrieval does not answer; see: kirolearn logs retrieval")
    click.echo(f"embeddings {found['embeddings']}; search mode {found['mode']}")
    if "unembedded" in found:
        click.echo(f"{found['embedded']} embedded since start, {found['unembedded']} waiting")


@embeddings.command(name="backfill")
@click.option("--timeout", type=float, default=3600.0, show_default=True,
              help="Seconds to wait for the last record.")
def embeddings_backfill(timeout: float) -> None:
    """Embed every record that has no vector yet, and wait until none is left.

    The daemon does this by itself in the background; this starts it at once and
    shows the progress. Stopping it (Ctrl-C) loses nothing.
    """
    if not _running():
        raise click.ClickException("kirolearn is not running; start it with 'kirolearn start'")
    deadline = time.monotonic() + timeout
    while True:
        try:
            with transport.Client(paths.endpoint("retrieval"), timeout_ms=2000) as client:
                found = client.call("embeddings", {"backfill": True})
        except (transport.Timeout, protocol.RemoteError) as exc:
            raise click.ClickException(f"retrieval does not answer ({exc})") from exc
        if "unembedded" not in found:
            raise click.ClickException(f"embeddings are {found['embeddings']}")
        waiting = _unembedded()
        click.echo(f"{waiting} record(s) waiting", err=True)
        if waiting == 0:
            click.echo("every record has its vector")
            return
        if time.monotonic() > deadline:
            raise click.ClickException(f"{waiting} record(s) still waiting after {timeout} s")
        time.sleep(1.0)


@embeddings.command(name="download")
def embeddings_download() -> None:
    """Fetch the model from the Hugging Face hub into its cache, for a machine without
    the packaged copy. The one command that reaches the network; HF_ENDPOINT and
    HF_HUB_OFFLINE are honoured. The daemon takes the model at its next start."""
    try:
        fetched = embeddings_.download()
    except embeddings_.Unavailable as exc:
        raise click.ClickException(str(exc)) from exc
    for name, path in fetched.items():
        click.echo(f"{name}: {path}")
    try:
        files = embeddings_.find_model(config.load()["embeddings"]["model_dir"])
    except embeddings_.Unavailable as exc:
        raise click.ClickException(f"downloaded, but {exc}") from exc
    click.echo(f"the daemon uses the model from: {files.source}")
    if _running():
        click.echo("restart to load it: kirolearn restart")


def _unembedded() -> int:
    conn = _reader()
    try:
        return db.count_unembedded(conn)
    finally:
        conn.close()


@cli.group()
def worker() -> None:
    """Run a worker in this terminal, attached to a running daemon."""


@worker.command(name="extraction")
@click.option("--connect", "daemon_home", type=click.Path(exists=True, file_okay=False),
              default=None, help="The daemon's KIROLEARN_HOME (default: this one).")
def worker_extraction(daemon_home: str | None) -> None:
    """Take extraction batches from a running daemon beside its own workers.

    Batches are leased, so stopping this worker (Ctrl-C) loses nothing: a batch it
    had not returned is handed out again.

    \b
    Example:
        kirolearn worker extraction --connect /srv/kirolearn
    """
    from kirolearn import role
    from kirolearn.extraction import ExtractionWorker

    base = Path(daemon_home).resolve() if daemon_home else paths.home()
    if not paths.daemon_running(base):
        raise click.ClickException(f"no kirolearn daemon is running in {base}")
    try:
        settings = config.load(base)
    except config.ConfigError as exc:
        raise click.ClickException(f"configuration error: {exc}") from exc
    name = f"worker-{os.getpid()}"
    role.setup_logging(name, settings["logging"]["level"])
    sys.exit(ExtractionWorker(name, base, settings).run(standalone=True))



# -- agent hooks ------------------------------------------------------------------------------


def _install_target(project_dir: str | None, global_: bool) -> Path | None:
    """The project whose agent configuration to change (None: the user's own)."""
    if project_dir and global_:
        raise click.UsageError("give --project DIR or --global, not both")
    if global_:
        return None
    if project_dir:
        return Path(project_dir).resolve()
    here = project.resolve_project()
    if here.is_global:
        raise click.UsageError(
            "the current directory is in no project; give --project DIR or --global")
    return Path(here.root)


def agent_options(command):
    command = click.option("--global", "global_", is_flag=True,
                           help="The user's own configuration, for every project.")(command)
    command = click.option("--project", "project_dir", default=None,
                           type=click.Path(exists=True, file_okay=False),
                           help="The project to configure (default: the current one).")(command)
    return click.option("--agent", "agents", required=True, multiple=True,
                        type=click.Choice(install_.AGENTS),
                        help="The agent to configure (repeat for several).")(command)


@cli.command()
@agent_options
def install(agents: tuple[str, ...], project_dir: str | None, global_: bool) -> None:
    """Add kirolearn's hooks to an agent's configuration (merged into what is there; a
    changed file is backed up to <file>.kirolearn.bak; running it again changes nothing).

    \b
    Examples:
        kirolearn install --agent claude-code
        kirolearn install --agent kiro-cli --global
    """
    _change_agents(install_.install, agents, _install_target(project_dir, global_))
    if not _running():
        click.echo("The daemon is not running; the first hook starts it (or: kirolearn start).")


@cli.command()
@agent_options
def uninstall(agents: tuple[str, ...], project_dir: str | None, global_: bool) -> None:
    """Remove kirolearn's hooks from an agent's configuration (and nothing else)."""
    _change_agents(install_.uninstall, agents, _install_target(project_dir, global_))


def _change_agents(operation, agents: tuple[str, ...], target: Path | None) -> None:
    for agent in agents:
        try:
            changes = operation(agent, target, Path.home())
        except (install_.InstallError, OSError) as exc:
            raise click.ClickException(f"{agent}: {exc}") from exc
        for change in changes:
            click.echo(f"{agent}: {change}")


@cli.command()
@click.option("--project", "project_dir", default=None,
              type=click.Path(exists=True, file_okay=False),
              help="The project whose agent configuration to check (default: the current one).")
def doctor(project_dir: str | None) -> None:
    """Check the daemon, its sockets, the database, the spool and each agent's hooks, and
    say what to fix. Exit 1 when something is wrong."""
    problems = 0

    def report(ok: bool | None, what: str, detail: str) -> None:
        nonlocal problems
        mark = {True: "ok  ", False: "FAIL", None: "note"}[ok]
        problems += ok is False
        click.echo(f"{mark}  {what}: {detail}")

    running = _running()
    report(running, "daemon", f"running (pid {read_pid(paths.pidfile())})" if running
           else "not running; run: kirolearn start (the first hook also starts it)")
    if running:
        try:
            roles = _supervisor("status")["roles"]
            bad = [f"{r['name']} {r['state']}" for r in roles if r["state"] != RUNNING]
            report(not bad, "roles", "all RUNNING" if not bad else
                   f"{', '.join(bad)}; see: kirolearn logs")
        except (transport.Timeout, protocol.RemoteError) as exc:
            report(False, "roles",
                   f"the supervisor does not answer ({exc}); run: kirolearn restart")
        try:
            with transport.Client(paths.endpoint("ingest"), timeout_ms=1000) as client:
                client.call("ping")
            report(True, "sockets", f"ingest answers on {paths.endpoint('ingest')}")
        except (transport.Timeout, protocol.RemoteError) as exc:
            report(False, "sockets", f"ingest does not answer ({exc}); run: kirolearn restart")
    report(*_check_database())
    waiting = len(spool.waiting())
    if waiting:
        report(None if running else False, "spool",
               f"{waiting} event(s) waiting in {paths.spool_dir()}; the daemon stores them"
               " within seconds of starting")
    else:
        report(True, "spool", "empty")
    scopes: list[tuple[str, Path | None]] = [("user", None)]
    here = Path(project_dir).resolve() if project_dir else None
    if here is None and not project.resolve_project().is_global:
        here = Path(project.resolve_project().root)
    if here is not None:
        scopes.insert(0, (f"project {here}", here))
    installed = 0
    for agent in install_.AGENTS:
        for scope, target in scopes:
            if agent == "kiro-ide" and target is None:
                continue
            state, detail = install_.check(agent, target, Path.home())
            installed += state != "missing"
            if state != "missing":
                report(state == "installed", f"{agent} ({scope})", detail)
    if not installed:
        report(None, "agents", "no agent has kirolearn's hooks here; run: kirolearn install"
               " --agent kiro-cli|kiro-ide|claude-code")
    sys.exit(1 if problems else 0)


def _check_database() -> tuple[bool | None, str, str]:
    path = paths.db_path()
    if not path.exists():
        return None, "database", f"{path} does not exist yet (created when the daemon starts)"
    mode = path.stat().st_mode & 0o777
    if mode & 0o077:
        return False, "database", (f"{path} is readable by others (mode {mode:o});"
                                   f" run: chmod 600 {path}")
    try:
        conn = db.connect_reader(path)
        try:
            check = conn.execute("PRAGMA quick_check").fetchone()[0]
            applied = conn.execute("SELECT max(version) FROM _migrations").fetchone()[0]
        finally:
            conn.close()
    except sqlite3.Error as exc:
        return False, "database", f"{path} cannot be read ({exc})"
    if check != "ok":
        return False, "database", f"{path} is damaged ({check}); restore a backup or export/import"
    latest = db.MIGRATIONS[-1][0]
    if applied != latest:
        return (None if _running() else False), "database", (
            f"{path} is at schema {applied}, this kirolearn expects {latest};"
            " it migrates when the daemon starts")
    return True, "database", f"{path} (schema {applied}, private)"
