"""``kirolearn extraction``: the batches of events that become memory records."""

from __future__ import annotations

import click

from kirolearn import control
from kirolearn.cli import common
from kirolearn.cli.common import reader, require_running
from kirolearn.db import batches


@click.group()
def extraction() -> None:
    """The batches of events that become memory records.

    \b
    Examples:
        kirolearn extraction failed
        kirolearn extraction retry
    """


@extraction.command(name="failed")
def extraction_failed() -> None:
    """List the batches extraction gave up on, with the reason. Exit 1 if there are any."""
    with reader() as conn:
        failed = batches.failed_batches(conn)
    if not failed:
        click.echo("no failed batches")
        return
    for batch in failed:
        click.echo(f"{batch['batch_id']}  {batch['namespace']}  {batch['events']} event(s):"
                   f" {batch['error']}")
    click.echo("run: kirolearn extraction retry")
    raise SystemExit(1)


@extraction.command(name="retry")
def extraction_retry() -> None:
    """Hand every failed batch to the workers again (after fixing what made it fail,
    e.g. the model's endpoint)."""
    require_running()
    try:
        requeued = control.call("storage", "retry_batches", timeout_ms=control.WRITE_MS,
                                home=common.home())
    except control.Unanswered as exc:
        raise click.ClickException(f"storage does not answer ({exc}); see: kirolearn logs"
                                   " storage") from exc
    click.echo(f"{requeued['requeued']} failed batch(es) handed out again")


COMMANDS = [extraction]
