"""``kirolearn mcp``: the MCP server an agent starts, and waits for, at each session; in
a module of its own so that its start imports only what it needs."""

from __future__ import annotations

import click

from kirolearn import config, project


@click.command()
@click.option("--scope", type=click.Choice(project.SCOPES),
              default=None, help="Which memories it serves (default: mcp.scope).")
def mcp(scope: str | None) -> None:
    """Serve the MCP tools on stdio, for an agent to start (kirolearn install registers
    it): search_memory, recall, resume_session, timeline, get_records,
    save_observation, save_session_summary, update_memory and forget, for the project
    of the current directory.

    \b
    Example (what an agent's configuration runs):
        kirolearn mcp
        kirolearn mcp --scope project+global
    """
    from kirolearn import mcp_server  # the SDK: not for --help

    try:
        mcp_server.main(scope)
    except config.ConfigError as exc:
        raise click.ClickException(f"configuration error: {exc}") from exc


COMMANDS = [mcp]
