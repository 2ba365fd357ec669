"""``courier`` commands for names not yet registered and for held mail (project token).

Annotations are evaluated as written (no postponed evaluation): the commands
are defined inside ``install``, where typer could not look their types up.
"""

from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from messaging.client import CourierClient

Project = Annotated[str, typer.Option("--project", envvar="COURIER_PROJECT",
                                      help="project id")]


def install(root: typer.Typer) -> None:  # noqa: C901 - one short function per command
    """Add the commands to ``root`` (the ``courier`` app)."""
    from messaging.cli import AsJson, Token, Url, _call, _print_json, out

    name_app = typer.Typer(help="Names mail may wait for before any agent has them.",
                           no_args_is_help=True)


    @root.command()
    def names(project: Project, url: Url = None, token: Token = None,
              as_json: AsJson = False) -> None:
        """List the project's authorized names and the mail waiting for each."""
        rows = _call(url, token, CourierClient.names, project)
        if as_json:
            _print_json(rows)
            return
        table = Table("name", "expires", "waiting")
        for r in rows:
            table.add_row(escape(r["name"]), r["expires_ts"], str(r["waiting"]))
        out.print(table)


    @name_app.command("allow")
    def name_allow(
        name: str,
        project: Project,
        ttl: Annotated[int | None, typer.Option("--ttl", help="seconds it stays authorized "
                                                              "[default: 3600]")] = None,
        url: Url = None, token: Token = None, as_json: AsJson = False,
    ) -> None:
        """Authorize a name: mail to it waits for its first agent until it runs out."""
        row = _call(url, token, CourierClient.allow_name, project, name, ttl)
        if as_json:
            _print_json(row)
            return
        out.print(f"{escape(row['name'])}: mail waits for its first agent "
                  f"until {row['expires_ts']}")


    @name_app.command("end")
    def name_end(name: str, project: Project, url: Url = None, token: Token = None) -> None:
        """End an authorization: the mail waiting for it fails, undelivered."""
        _call(url, token, CourierClient.end_name, project, name)
        out.print(f"{escape(name)}: authorization ended")


    @root.command()
    def held(project: Project, url: Url = None, token: Token = None,
             as_json: AsJson = False) -> None:
        """List held mail, oldest first."""
        rows = _call(url, token, CourierClient.held, project)
        if as_json:
            _print_json(rows)
            return
        table = Table("delivery", "from", "to", "subject", "admitted")
        for r in rows:
            m = r["message"]
            table.add_row(r["delivery_id"], escape(m["from"]), escape(r["recipient"]),
                          escape(m["subject"]), r["stages"]["admitted"])
        out.print(table)


    @root.command()
    def release(delivery_id: str, url: Url = None, token: Token = None) -> None:
        """Release a held delivery: it goes to its recipient as usual."""
        d = _call(url, token, CourierClient.release, delivery_id)
        out.print(f"{d['delivery_id']} released to {escape(d['recipient'])}")


    @root.command()
    def decline(delivery_id: str, url: Url = None, token: Token = None) -> None:
        """Decline a held delivery: it ends rejected, never shown to its recipient."""
        d = _call(url, token, CourierClient.decline, delivery_id)
        out.print(f"{d['delivery_id']} declined: outcome {d['outcome']}")
    root.add_typer(name_app, name="name")
