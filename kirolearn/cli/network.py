"""Commands for a daemon shared over TCP: keys (init, add, list, revoke) on the daemon's
host, connect on each machine that uses it."""

from __future__ import annotations

import json
from pathlib import Path

import click

from kirolearn import control, keys, paths, project, transport
from kirolearn.cli import common


def _keys_call(action, *args):
    try:
        return action(*args)
    except keys.KeysError as exc:
        raise click.ClickException(str(exc)) from exc


@click.group(name="keys")
def keys_group() -> None:
    """The CURVE keys of a daemon that listens on TCP: its own pair, the clients it lets
    in (each key is its actor: it reads and writes that actor's memories, and the
    team's in the projects it works on or is granted), and the extraction workers.
    Changes take effect at once, without a restart (docs/team.md).

    \b
    Examples:
        kirolearn keys init
        kirolearn keys add alice 'rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7'
        kirolearn keys add --worker gpu-box 'Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID'
        kirolearn keys grant alice git@git.example.org:team/app.git
        kirolearn keys list
        kirolearn keys revoke alice
    """


@keys_group.command(name="init")
def keys_init() -> None:
    """Make the daemon's key pair (once); print the public key that clients are given."""
    pair = _keys_call(keys.init_server, common.home())
    click.echo(f"server public key: {pair.public.decode()}")
    secret = keys.keys_dir(common.home()) / "server.key_secret"
    click.echo(f"secret key in {secret} (0600); keep it there")
    click.echo("next: kirolearn start --listen tcp://0.0.0.0:5555")


@keys_group.command(name="add")
@click.argument("name")
@click.argument("public_key")
@click.option("--worker", is_flag=True,
              help="An extraction worker's key (`kirolearn worker extraction` prints it):"
                   " let in on the workers' ports only.")
def keys_add(name: str, public_key: str, worker: bool) -> None:
    """Let the client with PUBLIC_KEY in, as NAME: the actor whose memories it reads and
    writes (`kirolearn connect` on that machine prints the exact command). With
    --worker, an extraction worker instead, which takes batches and nothing else."""
    _keys_call(keys.allow, name, public_key, common.home(), keys.WORKER if worker else keys.CLIENT)
    click.echo(f"allowed {name}" + (" (extraction worker)" if worker else ""))


def _project_id(given: str) -> str:
    """A project as a person names it: its id (64 hex digits), a git remote's URL, or a
    clone's folder (its origin remote, as a connected machine names it)."""
    given = given.strip()
    if keys.PROJECT_ID.match(given):
        return given
    origin = (project.git_origin(given) if Path(given).is_dir()
              else project.normal_origin(given))
    if origin is None:
        raise click.UsageError(f"{given!r} is not a project id, a git remote's URL, nor the"
                               " folder of a clone with an origin remote")
    return project.git_project_id(origin)


@keys_group.command(name="grant")
@click.argument("name")
@click.argument("project_ref", metavar="PROJECT")
@click.option("--revoke", is_flag=True, help="Take the grant back.")
def keys_grant(name: str, project_ref: str, revoke: bool) -> None:
    """Let the client NAME read the team's memories of PROJECT (its id, a git remote's
    URL, or a clone's folder) before it has contributed to it itself; --revoke takes that
    back (what it contributed to stays visible to it)."""
    project_id = _project_id(project_ref)
    _keys_call(keys.grant, name, project_id, common.home(), revoke)
    click.echo(f"{'took back from' if revoke else 'granted'} {name}: project {project_id}")


@keys_group.command(name="list")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def keys_list(as_json: bool) -> None:
    """The daemon's public key and every client allowed in."""
    try:
        server = keys.server_pair(common.home()).public.decode()
    except keys.KeysError:
        server = None
    home = common.home()
    clients = {name: key.decode() for name, key in keys.allowed(home).items()}
    workers = {name: key.decode() for name, key in keys.allowed(home, kind=keys.WORKER).items()}
    grants = {name: sorted(keys.grants(name, home)) for name in clients}
    if as_json:
        click.echo(json.dumps({"server": server, "clients": clients, "workers": workers,
                               "grants": grants}))
        return
    click.echo(f"server public key: {server or '(none yet: kirolearn keys init)'}")
    for name, key in clients.items():
        click.echo(f"{name:<24}{key}")
        for project_id in grants[name]:
            click.echo(f"{'':<24}granted project {project_id}")
    for name, key in workers.items():
        click.echo(f"{name:<24}{key}  (extraction worker)")
    if not clients:
        click.echo("no client is allowed yet (kirolearn keys add NAME PUBLIC_KEY)")


@keys_group.command(name="revoke")
@click.argument("name")
def keys_revoke(name: str) -> None:
    """Shut the client or worker NAME out, within a second: its requests are refused and
    its replies dropped; a worker's connection is closed and its batches go out again."""
    kind = _keys_call(keys.revoke, name, common.home())
    click.echo(f"revoked {name}" + (" (extraction worker)" if kind == keys.WORKER else ""))


@click.command()
@click.argument("address", required=False)
@click.option("--server-key", help="The daemon's public key (`kirolearn keys list` there).")
@click.option("--private", is_flag=True,
              help="Keep this machine's memories to its user (teammates' are still found).")
@click.option("--off", is_flag=True, help="Use this machine's own daemon again.")
def connect(address: str | None, server_key: str | None, private: bool, off: bool) -> None:
    """Make this machine a client of the daemon at ADDRESS (tcp://HOST:PORT): its hooks,
    MCP servers and searches go there, over CURVE, and events wait in the local spool
    while it cannot be reached. Without ADDRESS, say where this machine's memory is.

    A git project is then named by its origin remote, so every teammate's clone is the
    same project, and its memories are shared with the team. With --private, this
    user's are not: they are stored as the actor USER+private, which only this user's
    searches take in.

    \b
    Examples:
        kirolearn connect tcp://10.0.0.5:5555 --server-key "$SERVER_KEY"
        kirolearn connect tcp://10.0.0.5:5555 --server-key "$SERVER_KEY" --private
        kirolearn connect
        kirolearn connect --off
    """
    target = common.home().remote_file
    if off:
        target.unlink(missing_ok=True)
        click.echo("this machine uses its own daemon again (kirolearn start)")
        return
    if address is None:
        try:
            found = control.remote(common.home())
        except control.BadRemote as exc:
            raise click.ClickException(str(exc)) from exc
        click.echo(f"connected to {found.endpoint} as {project.actor_id()}" if found else
                   "not connected: this machine's own daemon serves it")
        return
    if not server_key:
        raise click.UsageError("give the daemon's public key: --server-key KEY")
    try:
        transport.tcp_endpoints(address)
        key = keys.check_public_key(server_key)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    if control.running(common.home()):
        raise click.ClickException("this machine's own daemon is running; stop it first"
                                   " (kirolearn stop)")
    pair = keys.client_pair(common.home(), create=True)
    common.home().ensure_layout()
    paths.write_private(target, json.dumps({"endpoint": address, "server_key": key.decode(),
                                            "private": private}).encode())
    try:
        control.call("ingest", "ping", timeout_ms=control.LOOKUP_MS, home=common.home())
    except control.Unanswered:
        click.echo(f"saved; {address} does not answer yet. On the daemon's host, allow this"
                   " machine with:")
        # "--": a key may begin with "-", which would read as an option
        click.echo(f"    kirolearn keys add -- {project.user()}"
                   f" '{pair.public.decode()}'")
        return
    click.echo(f"connected to {address} as {project.actor_id()}: hooks, MCP servers and"
               " searches go there")


COMMANDS = [keys_group, connect]
