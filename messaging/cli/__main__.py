"""``python -m messaging.cli``: the ``courier`` command."""

from messaging.cli.commands import main

main()
