"""The cluster's network: the bridge with the pods' host address and the guard chain that keeps
that address local, the CNI configuration, and the relay (`lab-gateway`) through which pods reach
the lab's services on HOST_ADDR (the package's docstring says why a relay and not a DNAT)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from benchfarm_devlab.cluster.common import CNI_DIR, CNI_NETWORK, GUARD, run, write
from benchfarm_devlab.config import BRIDGE, HOST_ADDR, POD_CIDR, PORTS
from benchfarm_devlab.processes import start_process


def iptables(*args: str, check: bool = True, table: str = "filter") -> subprocess.CompletedProcess:
    return run("iptables", "-w", "5", "-t", table, *args, check=check, what="iptables")


def network_up() -> None:
    """The bridge with the pods' host address, and the guard that keeps that address local."""
    if not Path(f"/sys/class/net/{BRIDGE}").exists():
        run("ip", "link", "add", BRIDGE, "type", "bridge", what=f"bridge {BRIDGE}")
    run("ip", "addr", "replace", f"{HOST_ADDR}/{POD_CIDR.split('/')[1]}", "dev", BRIDGE,
        what=f"bridge {BRIDGE}")
    run("ip", "link", "set", BRIDGE, "up", what=f"bridge {BRIDGE}")
    if iptables("-S", GUARD, check=False).returncode != 0:
        iptables("-N", GUARD)
    iptables("-F", GUARD)
    iptables("-A", GUARD, "-d", HOST_ADDR, "-i", BRIDGE, "-j", "RETURN")
    iptables("-A", GUARD, "-d", HOST_ADDR, "-i", "lo", "-j", "RETURN")
    iptables("-A", GUARD, "-d", HOST_ADDR, "-j", "DROP")
    if iptables("-C", "INPUT", "-j", GUARD, check=False).returncode != 0:
        iptables("-I", "INPUT", "-j", GUARD)
    (CNI_DIR / "net.d").mkdir(parents=True, exist_ok=True)
    conflist = {"cniVersion": "0.4.0", "name": CNI_NETWORK, "plugins": [{
        "type": "bridge", "bridge": BRIDGE, "isGateway": True, "ipMasq": False, "hairpinMode": True,
        "ipam": {"type": "host-local", "ranges": [[{"subnet": POD_CIDR, "gateway": HOST_ADDR}]],
                 "routes": [{"dst": "0.0.0.0/0"}], "dataDir": str(CNI_DIR / "ipam")}}]}
    write(CNI_DIR / "net.d" / "10-benchfarm.conflist", json.dumps(conflist, indent=2))


def pod_addresses() -> dict[str, str]:
    """Where a pod reaches the lab (host:port), as a local process reaches it on 127.0.0.1."""
    return {"apiserver": f"{HOST_ADDR}:{PORTS.apiserver}",
            "coordinator": f"{HOST_ADDR}:{PORTS.coordinator}",
            "minio": f"{HOST_ADDR}:{PORTS.minio}",
            "sshd": f"{HOST_ADDR}:{PORTS.sshd}"}


def _relayed_ports() -> list[int]:
    # the exporter hosts' SSH: the way to every console and power switch (labnet.py), and
    # where sessions stage software (sshd.py)
    return [PORTS.apiserver, PORTS.coordinator, PORTS.minio, PORTS.sshd]


def start_gateway() -> None:
    ports = _relayed_ports()

    def ready() -> bool:
        import socket
        for p in ports[:3]:
            with socket.socket() as s:
                s.settimeout(0.5)
                if s.connect_ex((HOST_ADDR, p)) != 0:
                    return False
        return True
    start_process("lab-gateway", [sys.executable, "-m", "benchfarm_devlab.relay",
                                  HOST_ADDR, *map(str, ports)],
                  ports=[], ready=ready, timeout=20, restart_on_change=True)
