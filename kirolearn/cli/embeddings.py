"""``kirolearn embeddings``: the records' vectors, for semantic and hybrid search."""

from __future__ import annotations

import time

import click

from kirolearn import config, control
from kirolearn.cli import common
from kirolearn.cli.common import reader, require_running
from kirolearn.db import reads
from kirolearn.search import embeddings as model


@click.group()
def embeddings() -> None:
    """The records' vectors, for semantic and hybrid search.

    \b
    Examples:
        kirolearn embeddings status
        kirolearn embeddings backfill --timeout 600
    """


@embeddings.command(name="status")
def embeddings_status() -> None:
    """Whether embeddings are on (and which model), and how many records wait for one."""
    require_running()
    found = control.embeddings_state(common.home())
    if found is None:
        raise click.ClickException("retrieval does not answer; see: kirolearn logs retrieval")
    click.echo(f"embeddings {found['embeddings']}; search mode {found['mode']}")
    if "model" in found:
        click.echo(f"model {found['model']}")
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
    require_running()
    deadline = time.monotonic() + timeout
    while True:
        try:
            found = control.call("retrieval", "embeddings", {"backfill": True}, home=common.home())
        except control.Unanswered as exc:
            raise click.ClickException(f"retrieval does not answer ({exc})") from exc
        if "unembedded" not in found:
            raise click.ClickException(f"embeddings are {found['embeddings']}")
        with reader() as conn:
            waiting = reads.count_unembedded(conn)
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
        fetched = model.download()
    except model.Unavailable as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"model: {fetched}")
    try:
        files = model.find_model(config.load(common.home())["embeddings"]["model_dir"])
    except model.Unavailable as exc:
        raise click.ClickException(f"downloaded, but {exc}") from exc
    click.echo(f"the daemon uses the model from: {files.source} (vector space {files.space})")
    if control.running(common.home()):
        click.echo("restart to load it: kirolearn restart")


COMMANDS = [embeddings]
