"""A HydraFlow spawn seam as a process, for the rehearsal (test_rehearsal.py): what HydraFlow does
at each of its four seams, with enforcement in front.

``python seam_script.py HOME STEPS EVENTS``: for each step of the JSON file STEPS (``at``, the
time every record of the step carries; ``spawn``, the spawn document; ``request``, the argv or
request mapping the seam would spawn from; ``credential``, a file holding the credential), in
order:

1. build the :class:`Spawn` and ask the :class:`Enforcer` (the installed ``hydraflow`` plugin's
   seams, loaded by entry point as any host loads them);
2. on a refusal, log it and go to the next step: no credential is read, no child starts;
3. on an enforced route, apply it with the plugin's hook (``apply_route``); not governed, keep
   the request as it is; either way record the spawn in shadow mode, as HydraFlow does at every
   spawn it starts (docs/enforcement.md: the enforced decision sits beside it, never counted
   as a shadow decision);
4. read the credential, then start the child: the argv seams run ``python -c`` with the argv's
   arguments, the one-shot seam hands its request mapping to a child on stdin; each child prints
   what it was given.

Every event is one JSON line appended to EVENTS (fsynced), so the test reads the order in which
things happened.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from rensei_seams_hydraflow.routes import MAPPING_SEAMS

from rensei_routing.core.shadow.spawn import Spawn
from rensei_routing.enforce import EnforcedRoute, EnforcementRefused, Enforcer
from rensei_routing.plugins.manager import get_plugin_manager, seam_registry
from rensei_routing.plugins.routes import apply_route
from rensei_routing.shadow.recorder import ShadowRecorder
from rensei_routing.store.home import Home

#: The child at an argv seam: prints the arguments it was started with and whether it holds a
#: credential.
ARGV_CHILD = (
    "import json, os, sys; "
    "print(json.dumps({'argv': sys.argv[1:], 'credential': 'CRED' in os.environ}))"
)
#: The child at the one-shot seam: prints the request it was sent.
MAPPING_CHILD = (
    "import json, os, sys; "
    "print(json.dumps({'request': json.load(sys.stdin), 'credential': 'CRED' in os.environ}))"
)


def _emit(out: Any, event: dict[str, Any]) -> None:
    out.write(json.dumps(event, sort_keys=True) + "\n")
    out.flush()
    os.fsync(out.fileno())


def _child(seam: str, request: Any, credential: str) -> Any:
    env = {**os.environ, "CRED": credential}
    if seam in MAPPING_SEAMS:
        argv, stdin = [sys.executable, "-c", MAPPING_CHILD], json.dumps(request)
    else:
        argv, stdin = [sys.executable, "-c", ARGV_CHILD, *request[1:]], ""
    done = subprocess.run(argv, input=stdin, capture_output=True, text=True, env=env, check=True)
    return json.loads(done.stdout)


def main(home_path: str, steps_path: str, events_path: str) -> int:
    steps = json.loads(Path(steps_path).read_text(encoding="utf-8"))
    pm = get_plugin_manager(names=("hydraflow",))
    registry = seam_registry(pm)
    home = Home(Path(home_path))
    at = [""]
    with (
        Enforcer(home, registry, clock=lambda: at[0]) as enforcer,
        ShadowRecorder(home, registry, clock=lambda: at[0]) as recorder,
        open(events_path, "a", encoding="utf-8") as out,
    ):
        for i, step in enumerate(steps):
            at[0] = step["at"]
            spawn = Spawn.from_dict(step["spawn"])
            try:
                answer = enforcer.enforce(spawn)
            except EnforcementRefused as e:
                _emit(out, {"step": i, "event": "refused", "code": e.code, "seq": e.seq})
                continue
            request = step["request"]
            if isinstance(answer, EnforcedRoute):
                request = apply_route(pm, registry, spawn.seam, answer, request)
                _emit(out, {"step": i, "event": "enforced", "route": answer.to_dict()})
            else:
                _emit(out, {"step": i, "event": "not-governed", "reason": answer.reason})
            recorder.record_many([spawn])
            credential = Path(step["credential"]).read_text(encoding="utf-8")
            _emit(out, {"step": i, "event": "credential"})
            _emit(
                out, {"step": i, "event": "child", "saw": _child(spawn.seam, request, credential)}
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(*sys.argv[1:]))
