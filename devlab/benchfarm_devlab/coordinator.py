"""labgrid's coordinator as the embedded lab runs it: labgrid's own, saving with LibYAML.

The coordinator writes all its places and resources to YAML 15 s after any change (an acquire,
a release) with PyYAML's pure-Python emitter. At the 1,000 places of `make bench-scale` that is
about 1.2 s of CPU every 15 s while runs come and go: bursts that hold the coordinator's GIL
(its answers wait meanwhile) and, at the priority the lab gives the coordinator, take a CPU from
the operator's threads (seen in a sched_switch trace: 87 ms of one CPU's 91). Here labgrid's
Dumper is the same Dumper on LibYAML's emitter: the same text, in about a third of the CPU.
Everything else is labgrid's `labgrid-coordinator`, arguments included.
"""

from __future__ import annotations

import sys
from collections import OrderedDict

import yaml
from labgrid.remote.coordinator import main
from labgrid.util import yaml as labgrid_yaml


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


if __name__ == "__main__":
    labgrid_yaml.Dumper = fast_dumper()     # labgrid_yaml.dump reads it at each call
    sys.exit(main())
