"""``courier`` commands for names not yet registered and for held mail (project token).

Annotations are evaluated as written (no postponed evaluation): the commands
are defined inside ``install``, where typer could not look their types up.
"""

from typing import Annotated

import typer

from messaging.cli.io import AsJson, DeliveryId, Token, Url, answer, out, say, table, visible
from messaging.client import CourierClient
from messaging.types import Json

Project = Annotated[str, typer.Option("--project", envvar="COURIER_PROJECT",
                                      help="project id")]


def install(root: typer.Typer) -> None:  # noqa: C901 - one short function per command
    """Add the commands to ``root`` (the ``courier`` app)."""
    name_app = typer.Typer(help="Names mail may wait for before any agent has them.",
                           no_args_is_help=True)

    @root.command()
    def names(project: Project, url: Url = None, token: Token = None,
              as_json: AsJson = False) -> None:
        """List the project's authorized names and the mail waiting for each."""
        def show(found: Json) -> None:
            rows = [[r["name"], r["expires_ts"], r["waiting"]] for r in found["names"]]
            out.print(table(["name", "expires", "waiting"], rows, whole=[1]))

        answer(url, token, as_json, CourierClient.names_answer, project, show=show)

    @name_app.command("allow")
    def name_allow(
        name: str,
        project: Project,
        ttl: Annotated[int | None, typer.Option("--ttl", help="seconds it stays authorized "
                                                              "[default: 3600]")] = None,
        url: Url = None, token: Token = None, as_json: AsJson = False,
    ) -> None:
        """Authorize a name: mail to it waits for its first agent until it runs out."""
        answer(url, token, as_json, CourierClient.allow_name, project, name, ttl,
               show=lambda row: say(f"{visible(row['name'])}: mail waits for its first agent "
                                    f"until {row['expires_ts']}"))

    @name_app.command("end")
    def name_end(name: str, project: Project, url: Url = None, token: Token = None,
                 as_json: AsJson = False) -> None:
        """End an authorization: the mail waiting for it fails, undelivered."""
        answer(url, token, as_json, CourierClient.end_name, project, name,
               show=lambda _: say(f"{visible(name)}: authorization ended"))

    @root.command()
    def held(project: Project, url: Url = None, token: Token = None,
             as_json: AsJson = False) -> None:
        """List held mail, oldest first."""
        def show(found: Json) -> None:
            rows = [[r["delivery_id"], r["message"]["from"], r["recipient"],
                     r["message"]["subject"], r["stages"]["admitted"]]
                    for r in found["deliveries"]]
            out.print(table(["delivery", "from", "to", "subject", "admitted"], rows,
                            whole=[0, 4]))

        answer(url, token, as_json, CourierClient.held_answer, project, show=show)

    @root.command()
    def release(delivery_id: DeliveryId, url: Url = None, token: Token = None,
                as_json: AsJson = False) -> None:
        """Release a held delivery: it goes to its recipient as usual."""
        answer(url, token, as_json, CourierClient.release, delivery_id,
               show=lambda d: say(f"{d['delivery_id']} released to {visible(d['recipient'])}"))

    @root.command()
    def decline(delivery_id: DeliveryId, url: Url = None, token: Token = None,
                as_json: AsJson = False) -> None:
        """Decline a held delivery: it ends rejected, never shown to its recipient."""
        answer(url, token, as_json, CourierClient.decline, delivery_id,
               show=lambda d: say(f"{d['delivery_id']} declined: outcome {d['outcome']}"))

    root.add_typer(name_app, name="name")
