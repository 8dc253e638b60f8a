"""``rensei ui``: the local, read-only web console (rensei_routing/console) on waitress until
SIGTERM or Ctrl-C. Owns the options, the binding rule's start-up check and the loop; the pages
are the console's.
"""

from __future__ import annotations

import webbrowser
from pathlib import Path

import click

from ..errors import ConfigurationError
from ..files import token_from_file
from ._clock import now
from ._daemon import listen_options, log_to_stderr, stop_on_sigterm
from ._output import note
from ._root import CommandError, cli, home_option
from ._session import session
from ._store import home_of


@cli.command(name="ui", short_help="The local, read-only web console over this home.")
@listen_options(port=8790, printed="at start")
@click.option("--open", "open_", is_flag=True, help="Open the console in a web browser.")
@click.option(
    "--whatif-dir",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    default=None,
    help="Directory of candidate policy files (*.json) the what-if page offers.",
)
@click.option(
    "--fleet",
    "fleet_url",
    envvar="RENSEI_FLEET_URL",
    default=None,
    metavar="URL",
    help="A fleet evidence database (postgresql://..., as `rensei fleet ingest --to` fills it) "
    "for the fleet page; read through a read-only session. Default: $RENSEI_FLEET_URL.",
)
@home_option
def ui(
    bind: str,
    port: int,
    open_: bool,
    whatif_dir: Path | None,
    fleet_url: str | None,
    home: Path,
) -> None:
    """Serve the read-only console (overview, shadow, divergences, decisions, what-if,
    policies, audit, and the fleet report with --fleet) until SIGTERM. Every page opens the
    store read-only, so it runs beside writers and on read-only media. On a loopback address
    no token is needed; beyond loopback every request must carry the home's serve token
    (<home>/keys/serve.token), as a bearer header or by opening /?token=TOKEN once."""
    from ..console.app import is_loopback, make_app
    from ..console.context import Console
    from ..console.state import Doctor, Verifier, WhatIfJobs
    from ..control.listener import Limits, RunningServer

    h = home_of(home)
    h.info()
    token = None
    if not is_loopback(bind):
        path = h.keys_dir / "serve.token"
        if not path.is_file():
            raise CommandError(
                f"binding {bind} (beyond loopback) needs the home's serve token {path}: "
                "`rensei init` creates it"
            )
        try:
            token = token_from_file(str(path))
        except ConfigurationError as e:
            raise CommandError(str(e)) from e
    vocabulary = session().vocabulary()
    console = Console(
        home=h,
        clock=now,
        whatif_dir=whatif_dir,
        verifier=Verifier(h, now),
        doctor=Doctor(h, now),
        whatif=WhatIfJobs(h, now, vocabulary),
        vocabulary=vocabulary,
        fleet_url=fleet_url or None,
    )
    log_to_stderr()
    with stop_on_sigterm() as stop:
        try:
            server = RunningServer(
                make_app(console, token=token), host=bind, port=port, limits=Limits(threads=4)
            )
        except OSError as e:
            raise CommandError(f"cannot listen on {bind}:{port}: {e.strerror or e}") from e
        console.verifier.start()
        console.doctor.start()
        shown = f"[{bind}]" if ":" in bind else bind
        address = f"http://{shown}:{server.port}/"
        note(f"console: {address} (read-only; Ctrl-C stops it)")
        if open_ and not webbrowser.open(address):
            note(f"warning: no web browser could be opened here: open {address} yourself")
        while server.alive and not stop.wait(0.5):
            pass
        console.verifier.stop()
        console.doctor.stop()
        server.stop()
    if not stop.is_set():
        raise CommandError("the HTTP loop ended unexpectedly (see the log above)")
    note("stopped")
