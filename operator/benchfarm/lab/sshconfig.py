"""The lab's ssh_config for every ssh labgrid starts: staging (`ManagedFile`'s rsync and ssh,
deploy.py) and `LG_PROXY` (the forwards `proxymanager` opens to the coordinator, serial servers
and power switches through a jump host).

Why it exists: labgrid's SSH takes every option from the user's ssh config. A client that runs
somewhere else (a session pod, a lab with its own keys) names an ssh_config file in
`BENCHFARM_SSH_CONFIG` (the chart mounts one from `ssh.existingSecret`); it is given to every ssh
and rsync that labgrid starts, and nothing else is read. Both users call it before their first
ssh, so it lives below both.
"""

from __future__ import annotations

from labgrid.util.ssh import SSHConnection

from ..errors import InfraError
from ..settings import Settings

_BASE_ARGS = SSHConnection._get_ssh_base_args


def use_ssh_config(path: str | None = None) -> None:
    """Give labgrid's ssh and rsync this ssh_config (default: BENCHFARM_SSH_CONFIG); idempotent."""
    path = path or Settings.from_env().ssh_config
    if not path:
        return
    if " " in path:   # rsync -e joins ssh's arguments with spaces
        raise InfraError(f"BENCHFARM_SSH_CONFIG {path!r} has a space in it",
                         reason="StagingFailed")
    # labgrid calls SSHConnection._get_ssh_base_args() by its class name: only the class
    # attribute reaches every ssh it starts (master, commands, rsync's -e, proxy forwards).
    SSHConnection._get_ssh_base_args = staticmethod(lambda: [*_BASE_ARGS(), "-F", path])
