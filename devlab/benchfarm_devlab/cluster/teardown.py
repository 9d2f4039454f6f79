"""What cluster-up changed on the machine, so that cluster-down removes exactly that: the manifest
(the iptables and ip6tables chains and rules, the kernel settings, the shared files and
directories, before and after the node came up) and the host's cleanup from it (mounts, the
bridge, chains and rules, cgroups, the shims' sockets, files and directories)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

from benchfarm_devlab.cluster.common import (
    CGROUP_ROOT,
    CNI_NETWORK,
    GUARD,
    IPTABLES_TABLES,
    KUBELET_SYSCTLS,
    MANIFEST,
    NODE_COMPONENTS,
    OWNER,
    POD_LOGS,
    SHARED_DIRS,
    SHARED_FILES,
    SOCKET,
    run,
)
from benchfarm_devlab.cluster.node import cgroup_hierarchies
from benchfarm_devlab.config import BRIDGE, CLUSTER_DIR, STATE, say
from benchfarm_devlab.processes import pids_where, running_pid


def _load_manifest() -> dict:
    try:
        return json.loads(MANIFEST.read_text())
    except (OSError, ValueError):
        return {}


def _save_manifest(manifest: dict) -> None:
    tmp = MANIFEST.with_suffix(".tmp")
    tmp.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, MANIFEST)


def iptables_state() -> dict[str, dict[str, list[str]]]:
    """Every chain (`-N`) and rule (`-A`) of iptables and ip6tables, per table, as `-S` prints them."""
    out: dict[str, dict[str, list[str]]] = {}
    for cmd in ("iptables", "ip6tables"):
        if shutil.which(cmd) is None:
            continue
        out[cmd] = {}
        for table in IPTABLES_TABLES:
            res = run(cmd, "-w", "5", "-t", table, "-S", check=False)
            if res.returncode == 0:
                out[cmd][table] = [line for line in res.stdout.splitlines()
                                   if line.startswith(("-N ", "-A "))]
    return out


def _ours(name: str) -> bool:
    """A chain name of the kubelet's, kube-proxy's or the guard's."""
    return name.startswith("KUBE-") or name == GUARD


def _target(rule: str) -> str | None:
    m = re.search(r" -[jg] (\S+)", rule)
    return m.group(1) if m else None


def iptables_created(before: dict[str, dict[str, list[str]]],
                     now: dict[str, dict[str, list[str]]] | None = None) -> dict[str, dict[str, dict]]:
    """What appeared since `before`, of this cluster's: `KUBE-*` chains and the guard, and the
    rules in such chains or jumping to one (in any chain, built-in ones too). A rule that was
    there is not counted again (as many as there were)."""
    now = iptables_state() if now is None else now
    out: dict[str, dict[str, dict]] = {}
    for cmd, tables in now.items():
        for table, lines in tables.items():
            old = before.get(cmd, {}).get(table, [])
            chains = [ln[3:] for ln in lines if ln.startswith("-N ")
                      and _ours(ln[3:]) and ln not in old]
            left = list(old)
            rules = []
            for ln in lines:
                if not ln.startswith("-A "):
                    continue
                if ln in left:
                    left.remove(ln)
                    continue
                chain, target = ln.split()[1], _target(ln)
                if _ours(chain) or (target is not None and _ours(target)):
                    rules.append(ln)
            if chains or rules:
                out.setdefault(cmd, {})[table] = {"chains": chains, "rules": rules}
    return out


def _remove_iptables(created: dict[str, dict[str, dict]]) -> None:
    """Rules first (so no chain is referenced), then the chains: flushed, then deleted."""
    for cmd, tables in created.items():
        for table, what in tables.items():
            new_chains = set(what["chains"])
            for rule in what["rules"]:
                if rule.split()[1] not in new_chains:      # a new chain's rules go with it
                    run(cmd, "-w", "5", "-t", table, "-D", *shlex.split(rule)[1:], check=False)
            for chain in new_chains:
                run(cmd, "-w", "5", "-t", table, "-F", chain, check=False)
            for chain in new_chains:
                run(cmd, "-w", "5", "-t", table, "-X", chain, check=False)


def _sysctl(name: str) -> str | None:
    try:
        return (Path("/proc/sys") / name).read_text().strip()
    except OSError:
        return None


def record_before() -> None:
    """What is on the machine before cluster-up starts anything (once per cluster: a second up of
    a running one keeps the first record), and which shared directories it is about to create."""
    manifest = _load_manifest()
    if "iptables_before" not in manifest:
        manifest.update({
            "iptables_before": iptables_state(),
            "sysctls_before": {k: v for k in KUBELET_SYSCTLS if (v := _sysctl(k)) is not None},
            "files_before": [str(f) for f in SHARED_FILES if f.exists() or f.is_symlink()],
            "bridge": {"name": BRIDGE, "created": not Path(f"/sys/class/net/{BRIDGE}").exists()},
            "owner_file": str(OWNER),
        })
    created = manifest.setdefault("dirs_created", [])
    for d in SHARED_DIRS:          # on down they are removed again if empty
        top = None
        while not d.exists():
            top, d = d, d.parent
        if top is not None and str(top) not in created:
            created.append(str(top))
    _save_manifest(manifest)


def record_after() -> None:
    """What the node added: iptables chains and rules, processes (for `lab status` and tests)."""
    manifest = _load_manifest()
    manifest["iptables_created"] = iptables_created(manifest.get("iptables_before", {}))
    manifest["processes"] = {n: running_pid(n) for n in NODE_COMPONENTS if running_pid(n)}
    manifest["own_dirs"] = [str(CLUSTER_DIR)]
    manifest["cgroups"] = [str(h / CGROUP_ROOT) for h in cgroup_hierarchies()]
    _save_manifest(manifest)


def _mounts_under(root: Path) -> list[str]:
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        mnt = line.split()[4].replace("\\040", " ")
        if mnt == str(root) or mnt.startswith(str(root) + "/"):
            out.append(mnt)
    return sorted(out, key=lambda m: m.count("/"), reverse=True)


def _unmount_all(root: Path) -> None:
    for _ in range(3):
        mounts = _mounts_under(root)
        if not mounts:
            return
        for m in mounts:
            if subprocess.run(["umount", m], capture_output=True).returncode != 0:
                subprocess.run(["umount", "-l", m], capture_output=True)


def our_shims() -> list[int]:
    """containerd shims serving our containerd (they run in their own process groups)."""
    socket = str(SOCKET).encode()
    return pids_where(lambda cmd: cmd[0].endswith(b"containerd-shim-runc-v2") and socket in cmd)


def _shim_sockets(ids: list[str]) -> list[Path]:
    """The shims' sockets in /run/containerd/s (containerd 1.6 puts them there whatever its state
    dir): sha256 of <containerd address>/<namespace>/<id>."""
    out = []
    for i in ids:
        for addr in (str(SOCKET), f"{SOCKET}.ttrpc"):
            out.append(Path("/run/containerd/s") /
                       hashlib.sha256(f"{addr}/k8s.io/{i}".encode()).hexdigest())
    return out


def cleanup_host(container_ids: list[str]) -> None:
    manifest = _load_manifest()
    _unmount_all(CLUSTER_DIR)
    if manifest.get("bridge", {}).get("created", True) and Path(f"/sys/class/net/{BRIDGE}").exists():
        run("ip", "link", "del", BRIDGE, check=False)
    if "iptables_before" in manifest:
        _remove_iptables(iptables_created(manifest["iptables_before"]))
    else:
        say(f"cluster: no {MANIFEST.name} (a cluster of an older benchfarm?): iptables left as "
            "they are; remove its KUBE-* chains by hand")
    for name, value in manifest.get("sysctls_before", {}).items():
        if _sysctl(name) != value:
            try:
                (Path("/proc/sys") / name).write_text(value)
            except OSError as exc:
                say(f"cluster: {name} not put back to {value}: {exc}")
    for h in cgroup_hierarchies():     # deepest first; only empty cgroups can be removed
        root = h / CGROUP_ROOT
        if root.exists():
            for d in sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
                try:
                    d.rmdir()
                except OSError:
                    pass
            try:
                root.rmdir()
            except OSError as exc:
                say(f"cluster: cgroup {root} not removed: {exc}")
    for sock in _shim_sockets(container_ids):
        sock.unlink(missing_ok=True)
    for f in Path("/var/lib/cni/results").glob(f"{CNI_NETWORK}-*") if Path("/var/lib/cni/results").exists() else []:
        f.unlink(missing_ok=True)
    logs = Path("/var/log/containers")
    if logs.exists():
        for link in logs.iterdir():
            if link.is_symlink() and os.readlink(link).startswith(str(POD_LOGS)):
                link.unlink()
    for f in SHARED_FILES:
        if str(f) not in manifest.get("files_before", [str(f)]):
            f.unlink(missing_ok=True)
    for d in manifest.get("dirs_created", []):
        d = Path(d)          # remove what we created, deepest first, only if empty
        for sub in sorted((p for p in d.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)) \
                if d.exists() else []:
            try:
                sub.rmdir()
            except OSError:
                pass
        try:
            d.rmdir()
        except OSError:
            pass
    try:
        if OWNER.read_text().strip() == str(STATE):
            OWNER.unlink()
    except OSError:
        pass
    if not _mounts_under(CLUSTER_DIR):
        shutil.rmtree(CLUSTER_DIR, ignore_errors=True)
    else:
        say(f"cluster: still mounted under {CLUSTER_DIR}: {', '.join(_mounts_under(CLUSTER_DIR))}")
