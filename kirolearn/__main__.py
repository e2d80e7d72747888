"""``python -m kirolearn``: the same as the ``kirolearn`` command."""

from kirolearn.cli import cli

if __name__ == "__main__":
    cli()
