"""labgrid's coordinator as the embedded lab runs it: labgrid's own, saving with LibYAML, its event
loop out of asyncio's debug mode.

The coordinator writes all its places and resources to YAML 15 s after any change (an acquire,
a release) with PyYAML's pure-Python emitter. At the 1,000 places of `make bench-scale` that is
about 1.2 s of CPU every 15 s while runs come and go: bursts that hold the coordinator's GIL
(its answers wait meanwhile) and, at the priority the lab gives the coordinator, take a CPU from
the operator's threads (seen in a sched_switch trace: 87 ms of one CPU's 91). Here labgrid's
Dumper is the same Dumper on LibYAML's emitter: the same text, in about a third of the CPU.

labgrid's `main` also turns asyncio's debug mode on, always (`loop.set_debug(True)`, whatever
`--debug` says). In debug mode every callback, future and task records the stack that made it
(`traceback.extract_stack`, with a `stat` of each frame's source file): during `make
bench-scale`'s flood that was a quarter of the coordinator's samples (py-spy, 52 % of a CPU in
all), and a future resolved through the loop costs about 20 times the CPU it does otherwise.
Here the loop keeps debug mode only where asyncio's own switches ask for it (`python -X dev`,
`PYTHONASYNCIODEBUG`).

With BENCHFARM_LABGRID_CA/_CERT/_KEY set (the lab sets them: its labgrid CA, the coordinator's
server certificate), it takes only clients and exporters with a certificate of that CA (mutual TLS;
a plain client cannot connect at all) and a client is who its certificate says, not who it claims
to be: `benchfarm.lab.labgrid_compat.serve_checked`.

Everything else is labgrid's `labgrid-coordinator`, arguments included.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections import OrderedDict

import yaml
from labgrid.remote.coordinator import main
from labgrid.util import yaml as labgrid_yaml

from benchfarm.lab.labgrid_compat import TlsSettings, serve_checked
from benchfarm.settings import Settings


def _dict_representer(dumper: yaml.CSafeDumper, data: OrderedDict) -> yaml.Node:
    return dumper.represent_dict(data.items())


def fast_dumper() -> type:
    """labgrid's Dumper (SafeDumper, an OrderedDict written as a plain mapping) on LibYAML's
    emitter; labgrid's own where PyYAML was built without LibYAML."""
    if not yaml.__with_libyaml__:
        return labgrid_yaml.Dumper

    class Dumper(yaml.CSafeDumper):
        pass
    Dumper.add_representer(OrderedDict, _dict_representer)
    return Dumper


class QuietLoop(asyncio.SelectorEventLoop):
    """asyncio's loop, in debug mode only where asyncio's own switches ask for it."""

    def set_debug(self, enabled: bool) -> None:
        super().set_debug(enabled and debug_asked())


class QuietLoopPolicy(asyncio.DefaultEventLoopPolicy):
    """The policy labgrid's `main` gets its loop from (`asyncio.new_event_loop`)."""

    def new_event_loop(self) -> asyncio.AbstractEventLoop:
        return QuietLoop()


def debug_asked() -> bool:
    """asyncio's debug mode switches (Python's development mode, PYTHONASYNCIODEBUG)."""
    return sys.flags.dev_mode or bool(os.environ.get("PYTHONASYNCIODEBUG"))


if __name__ == "__main__":
    labgrid_yaml.Dumper = fast_dumper()     # labgrid_yaml.dump reads it at each call
    asyncio.set_event_loop_policy(QuietLoopPolicy())
    tls = TlsSettings.from_settings(Settings.from_env())
    if tls is not None:
        serve_checked(tls)
    sys.exit(main())
