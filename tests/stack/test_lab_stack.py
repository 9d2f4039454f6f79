"""Issue 2 on the real stack: API server, MinIO, labgrid coordinator/exporter, virtual boards."""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import sys
import threading
import time

import pytest
import yaml

import benchfarm_devlab as devlab
from benchfarm.api.devicetype import DeviceType
from benchfarm.core.readings.capture import KERNEL_TEXT_LINES
from benchfarm.lab.board import Board
from benchfarm.lab.coordinator import Coordinator
from benchfarm.lab.devicetypes import load_device_types
from benchfarm.settings import Settings
from benchfarm_devlab import labnet
from tests.stack import boots
from tests.stack.conftest import wait_for

pytestmark = pytest.mark.stack


def test_api_server_accepts_a_crd_and_serves_a_watch(kube):
    from kubernetes import client, watch
    ext = client.ApiextensionsV1Api(kube)
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.stacktest.benchfarm.io"},
        "spec": {"group": "stacktest.benchfarm.io", "scope": "Namespaced",
                 "names": {"kind": "Widget", "plural": "widgets", "singular": "widget"},
                 "versions": [{"name": "v1", "served": True, "storage": True, "schema": {
                     "openAPIV3Schema": {"type": "object", "properties": {
                         "spec": {"type": "object", "properties": {"size": {"type": "integer"}}}}}}}]},
    }
    try:
        ext.create_custom_resource_definition(crd)
    except client.ApiException as exc:
        assert exc.status == 409
    wait_for("CRD established", lambda: any(
        c.type == "Established" and c.status == "True"
        for c in (ext.read_custom_resource_definition("widgets.stacktest.benchfarm.io").status.conditions or [])))
    custom = client.CustomObjectsApi(kube)
    name = f"w{int(time.time() * 1000)}"
    seen: list[str] = []

    def watcher():
        w = watch.Watch()
        for ev in w.stream(custom.list_namespaced_custom_object, "stacktest.benchfarm.io", "v1",
                           "default", "widgets", timeout_seconds=20):
            seen.append(f"{ev['type']}:{ev['object']['metadata']['name']}")
            if ev["object"]["metadata"]["name"] == name:
                w.stop()
    t = threading.Thread(target=watcher)
    t.start()
    time.sleep(1)
    custom.create_namespaced_custom_object("stacktest.benchfarm.io", "v1", "default", "widgets", {
        "apiVersion": "stacktest.benchfarm.io/v1", "kind": "Widget", "metadata": {"name": name},
        "spec": {"size": 3}})
    t.join(25)
    assert f"ADDED:{name}" in seen
    ext.delete_custom_resource_definition("widgets.stacktest.benchfarm.io")


def test_rbac_denies_an_unprivileged_token(kube, lab):
    from kubernetes import client
    v1 = client.CoreV1Api(kube)
    try:
        v1.create_namespace({"metadata": {"name": "rbac-probe"}})
    except client.ApiException as exc:
        assert exc.status == 409
    sa = "nobody"
    try:
        v1.create_namespaced_service_account("rbac-probe", {"metadata": {"name": sa}})
    except client.ApiException as exc:
        assert exc.status == 409
    token = v1.create_namespaced_service_account_token(
        sa, "rbac-probe", {"spec": {"expirationSeconds": 600}}).status.token
    cfg = client.Configuration()
    cfg.host = kube.configuration.host
    cfg.ssl_ca_cert = kube.configuration.ssl_ca_cert
    cfg.api_key = {"authorization": f"Bearer {token}"}
    with pytest.raises(client.ApiException) as err:
        client.CoreV1Api(client.ApiClient(cfg)).list_namespaced_secret("default")
    assert err.value.status == 403


def test_minio_upload_and_read_back_with_checksum(lab):
    from benchfarm.store.artifacts import ArtifactStore, StoreConfig
    store = ArtifactStore(StoreConfig.from_settings(Settings.from_env()))
    data = os.urandom(300_000)
    key = f"stacktest/{time.time_ns()}/blob.bin"
    url = store.put(key, data)
    assert url == f"s3://{lab['BENCHFARM_S3_BUCKET']}/{key}"
    back = store.get(key)
    assert hashlib.sha256(back).hexdigest() == hashlib.sha256(data).hexdigest()
    assert store.sha256(key) == hashlib.sha256(data).hexdigest()
    store.put(key, data)  # idempotent: same key again, still one object
    assert store.list(key) == [key]


def test_coordinator_lists_places_with_tags(lab):
    c = Coordinator.from_settings(Settings.from_env(), address=lab["LG_COORDINATOR"], user="pytest", host="stacktest")
    try:
        places = c.places()
    finally:
        c.close()
    inventory = devlab.load_inventory()
    for board in inventory["boards"]:
        p = places[board["name"]]
        assert p.tags["device_type"] == board["deviceType"]
        for k, v in board.get("labels", {}).items():
            assert p.tags[k] == str(v)
        power = "PDUDaemonPort" if board.get("power") == "pdudaemon" else "NetworkPowerPort"
        assert "NetworkSerialPort" in p.resources and power in p.resources, p.resources




def _device_type(name: str) -> DeviceType:
    return load_device_types(devlab.DEVICE_TYPES)[name]


@pytest.mark.parametrize("place,dtype", [("vb-x86-1", "qemu-x86"), ("vb-a53-0", "qemu-arm64-a53")])
def test_power_cycle_through_labgrid_reaches_the_shell(lab, place, dtype):
    c = Coordinator.from_settings(Settings.from_env(), address=lab["LG_COORDINATOR"], user="pytest", host="stacktest")
    wait_for(f"{place} free", lambda: c.places()[place].free, timeout=300)
    c.acquire(place)
    try:
        board = Board(place, c.places()[place].resources, _device_type(dtype), c.session())
        try:
            timeline = boots.boot(board)   # retried as a session retries it
            assert timeline.reached_prompt
            # the console is read in chunks: the first byte and the kernel's banner may share one
            assert timeline.events["first-byte"] <= timeline.events["kernel"] <= timeline.events["prompt"]
            # the fused timeline: printk's clock placed on the host's by offset and rate, the
            # disagreement measured on lines printed and received after a pause (issue 13's
            # goal, 5 ms; measured: arm64 0.4-0.5 ms median, its timer exact; x86 1.5-4.9 ms,
            # its clock 0.3-0.7 % slow under TCG)
            clock = timeline.kernel
            assert clock is not None and 0.95 < clock.rate < 1.05, clock
            # the log from before the console was up is replayed at once (held, not measured);
            # an x86 clock that started over (fast TSC calibration failed under load) is placed
            # by its last epoch, whose lines all came after the replay
            assert clock.held > 10 or clock.restarts >= 1, clock
            assert clock.quiet_lines >= 5 and clock.quiet_median_ms is not None
            # after a pause: ~5 ms on a quiet machine; 15, 20.8, then 30.6 ms were seen for x86
            # on a loaded one (whole make tests), so its bound is the live lines' (a bound, not
            # a benchmark: make bench-boot measures it); arm64's timer keeps issue 13's 5 ms
            assert clock.quiet_median_ms <= (5.0 if dtype == "qemu-arm64-a53" else 60.0), clock
            # live lines: one was 34-50 ms per byte read; 21.6 ms, then 30.7 ms median on x86 in
            # clean-clone make tests on a loaded host, so twice that fails a broken fusion only
            # (a bound, not a benchmark: make bench-boot measures it)
            assert clock.median_ms <= 60.0, clock
            assert timeline.fused["kernel"] <= timeline.events["kernel"]
            if dtype == "qemu-arm64-a53":   # through real U-Boot, kernel and initramfs over TFTP
                e = timeline.events
                assert e["bootloader"] < e["bootloader-ready"] < e["starting-kernel"] < e["kernel"]
                log = board.serial_log.bytes()
                assert b"Bytes transferred" in log and b"Starting kernel" in log
                assert timeline.phases(board.device_type.boot.phases)["kernel-to-prompt"] == \
                    pytest.approx(e["prompt"] - e["starting-kernel"], abs=0.002)
            out = board.run("echo $((6*7)); cat /proc/uptime", timeout=20)
            assert out.exit_code == 0 and out.output.splitlines()[0] == "42"
            assert float(out.output.splitlines()[1].split()[0]) < 60  # a fresh boot
            # the image's kernel is the one its modules were built for: disk and network are up
            hw = board.run("test -f /lib/modules/$(uname -r)/modules.dep && test -b /dev/vda && "
                           "ip -4 addr show eth0 | grep -c 10.0.2.15", timeout=20)
            assert hw.exit_code == 0 and hw.output.strip().endswith("1"), hw.output
            assert b"Linux version" in board.serial_log.bytes()
            # the kernel prints its log between any two bytes of the shell's: commands still
            # end, with their exit codes, through a flood of kernel lines (/dev/kmsg unlimited)
            board.run("echo on > /proc/sys/kernel/printk_devkmsg; (while :; do echo "
                      "'<2>benchfarm: kernel noise' > /dev/kmsg; sleep 0.005; done) "
                      ">/dev/null 2>&1 & echo $! > /tmp/noise", timeout=20)
            try:
                for i in range(20):
                    r = board.run(f"echo out-{i}; exit {i % 3}", timeout=20)
                    assert not r.timed_out and r.exit_code == i % 3, r
                    # the command's output keeps the kernel's lines (its own noise, and any other the
                    # kernel prints then: "IPv6: ADDRCONF(NETDEV_CHANGE)" was seen in CI)
                    assert KERNEL_TEXT_LINES.sub("", r.output + "\n").strip() == f"out-{i}", r
            finally:
                board.run("kill $(cat /tmp/noise)", timeout=20)
            assert board.serial_log.bytes().count(b"benchfarm: kernel noise") >= 20
        finally:
            board.power_off()
            board.close()
    finally:
        assert c.release(place)
        c.close()


@pytest.mark.parametrize("place,dtype,state", [("vb-x86-0", "qemu-x86", "shell"),
                                               ("vb-a53-0", "qemu-arm64-a53", "bootloader")])
def test_a_device_types_labgrid_environment_is_a_file_labgrid_client_drives(lab, place, dtype,
                                                                            state):
    """The environment a session builds its board from is a labgrid user's file: labgrid's own
    client expands its RemotePlace, and `-s shell` / `-s bootloader` / `-s off` run benchfarm's
    strategy (the arm64 board stops in real U-Boot: its UBootDriver reached the `=> ` prompt)."""
    from tests.stack.runs import lab_forwarder
    forwarder = lab_forwarder()     # labgrid's client speaks no TLS: the lab admin's certificate
    env = {**os.environ, "LG_COORDINATOR": forwarder.address, "LG_PLACE": place,
           "LG_USERNAME": "pytest", "LG_HOSTNAME": "labgrid-client"}
    # labgrid's own client, every ssh it starts given the lab's ssh_config (BENCHFARM_SSH_CONFIG:
    # the exporters are --isolated, each resource reached through its exporter host's SSH)
    cli = [sys.executable, "-m", "benchfarm.lab.labgrid_forward", "--stock-client",
           "-c", str(devlab.DEVICE_TYPES / f"{dtype}.labgrid.yaml")]

    def client(*args: str) -> str:
        res = subprocess.run([*cli, *args], env=env, capture_output=True, text=True, timeout=180)
        assert res.returncode == 0, (args, res.stdout, res.stderr)
        return res.stdout

    c = Coordinator.from_settings(Settings.from_env(), address=lab["LG_COORDINATOR"], user="pytest", host="stacktest")
    try:
        wait_for(f"{place} free", lambda: c.places()[place].free, timeout=300)
        client("acquire")
        try:
            out = client("-s", state, "power", "get")
            assert f"Transitioning into state {state}" in out and out.rstrip().endswith("on"), out
            assert client("-s", "off", "power", "get").rstrip().endswith("off")
        finally:
            client("release")
    finally:
        c.close()
        forwarder.close()


def _outlet(index: int) -> str:
    return devlab.vlab_request(f"/outlet/{index}/")


def test_serial_port_is_connectable_while_off_and_shows_the_next_boot_from_its_start(lab):
    config = yaml.safe_load((devlab.STATE / "vlab" / "vlab.json").read_text())
    b = next(x for x in config["boards"] if x["name"] == "vb-x86-1")
    c = Coordinator.from_settings(Settings.from_env(), address=lab["LG_COORDINATOR"], user="pytest", host="stacktest")
    wait_for("vb-x86-1 free", lambda: c.places()["vb-x86-1"].free, timeout=300)
    c.acquire("vb-x86-1")
    try:
        board = Board("vb-x86-1", c.places()["vb-x86-1"].resources, _device_type("qemu-x86"),
                      c.session())
        board.power_off()
        assert _outlet(b["index"]) == "0"
        # the serial server as its exporter host sees it: in the lab network (labnet.py)
        sock = labnet.run_inside(
            lambda: socket.create_connection(("127.0.0.1", b["serial_port"]), timeout=5))
        time.sleep(0.5)
        sock.settimeout(0.2)
        with pytest.raises(socket.timeout):
            sock.recv(100)  # connected, and silent: the board is off
        board.target.activate(board.power)
        board.power.on()
        data = b""
        deadline = time.monotonic() + 60
        sock.settimeout(1)
        while b"benchfarm-init" not in data and time.monotonic() < deadline:
            try:
                data += sock.recv(65536)
            except TimeoutError:
                pass
        sock.close()
        first_line = data.split(b"\n", 1)[0]
        assert b"Linux version" in first_line, first_line[:200]
        board.power_off()
        board.close()
    finally:
        c.release("vb-x86-1")
        c.close()


def test_lab_up_twice_is_harmless(lab):
    before = devlab.status()
    for _ in range(2):
        res = subprocess.run([sys.executable, "-m", "benchfarm.cli", "lab", "up"], capture_output=True,
                             text=True, timeout=300)
        assert res.returncode == 0, res.stdout + res.stderr
    assert devlab.status() == before
    assert all(pid for pid in before.values())


def test_a_taken_port_is_named_with_its_component(tmp_path):
    env = {**os.environ, "BENCHFARM_STATE": str(tmp_path / "state"), "BENCHFARM_PORT_BASE": "23000"}
    with socket.socket() as s:
        s.bind(("127.0.0.1", 23000 + 379))  # etcd's client port in that range
        s.listen()
        res = subprocess.run([sys.executable, "-m", "benchfarm.cli", "lab", "up"], env=env,
                             capture_output=True, text=True, timeout=300)
    assert res.returncode == 1
    assert "etcd: port 23379" in res.stderr and "Traceback" not in res.stderr
