"""A place's labgrid environment: the device type's file with the place filled in, or derived."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from benchfarm.api.devicetype import DeviceType
from benchfarm.errors import InfraError
from benchfarm.lab.devicetypes import ENVIRONMENT_SUFFIX, load_device_types
from benchfarm.lab.environment import STRATEGY, environment, labgrid_variables
from benchfarm.settings import Settings

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "exporters" / "device-types"
SERIAL = {"host": "127.0.0.1", "port": 4000, "speed": 115200, "protocol": "raw"}
POWER = {"model": "simplerest", "index": 1, "host": "http://127.0.0.1:1/outlet/{index}/{value}"}


def _drivers(config: dict) -> dict[str, dict]:
    return {cls: args for d in config["drivers"] for cls, args in d.items()}


def test_every_shipped_device_type_names_a_labgrid_environment_for_its_place():
    types = load_device_types(SHIPPED)
    assert sorted(types) == sorted(p.name[:-5] for p in SHIPPED.glob("*.yaml")
                                   if not p.name.endswith(ENVIRONMENT_SUFFIX))
    for dt in types.values():
        assert dt.labgrid and Path(dt.labgrid).is_file(), dt.name
        config = environment("vb-42", {}, dt)
        assert config["resources"]["RemotePlace"] == {"name": "vb-42"}
        drivers = _drivers(config)
        assert STRATEGY in drivers and "ShellDriver" in drivers
        power = "PDUDaemonDriver" if dt.name == "qemu-x86-bench" else "NetworkPowerDriver"
        bootloader = {"UBootDriver", "TFTPProviderDriver"} if dt.arch == "arm64" \
            else set()   # U-Boot loads its files from the place's TFTP provider
        assert set(drivers) == {power, "SerialDriver", "ShellDriver", STRATEGY, *bootloader}
        assert bool(dt.deploy) == bool(bootloader), dt.name   # only a bootloader deploys


def test_the_arm64_boot_command_names_the_place_and_keeps_uboots_variables():
    dt = load_device_types(SHIPPED)["qemu-arm64-a53"]
    uboot = _drivers(environment("vb-a53-7", {}, dt))["UBootDriver"]
    assert "benchfarm.board=vb-a53-7 ${bf_args};" in uboot["boot_command"]
    assert "booti ${kernel_addr_r} ${ramdisk_addr_r}:${filesize} ${bf_fdt}" \
        in uboot["boot_command"]
    # what a run stages (lab.deploy's variables) defaults to the board's own image
    init = "\n".join(uboot["init_commands"])
    assert "setenv bf_kernel vmlinuz" in init and "setenv bf_fdt ${fdtcontroladdr}" in init
    from benchfarm.lab.deploy import VARIABLES
    assert all("${" + v + "}" in uboot["boot_command"] for v in VARIABLES.values())
    assert dt.boot.phases["kernel-to-prompt"] == ("starting-kernel", "prompt")


def test_the_place_overrides_an_lg_place_of_the_process(monkeypatch):
    monkeypatch.setenv("LG_PLACE", "someone-elses")
    dt = load_device_types(SHIPPED)["qemu-x86"]
    assert environment("vb-x86-1", {}, dt)["resources"]["RemotePlace"]["name"] == "vb-x86-1"


def _write(tmp: Path, env: str, **extra) -> DeviceType:
    (tmp / f"b{ENVIRONMENT_SUFFIX}").write_text(env)
    body = {"name": "b", "boot": {}, "labgrid": f"b{ENVIRONMENT_SUFFIX}", **extra}
    (tmp / "b.yaml").write_text(yaml.safe_dump(body))
    return load_device_types(tmp)["b"]


def test_a_users_environment_keeps_its_drivers_and_gets_the_strategy(tmp_path):
    dt = _write(tmp_path, """
targets:
  dut:
    resources:
      - RemotePlace: {name: !template "$LG_PLACE"}
    drivers:
      - TasmotaPowerDriver: {}
      - SerialDriver: {txdelay: 0.01}
      - ShellDriver: {prompt: '# ', login_prompt: 'login: ', username: !template "$LG_RACK"}
""")
    lab = Settings.from_env({"LG_RACK": "r7", "BENCHFARM_NAMESPACE": "lab"})   # LG_* only
    config = environment("p1", {}, dt, labgrid_variables(lab))
    assert config["resources"] == [{"RemotePlace": {"name": "p1"}}]
    drivers = _drivers(config)
    assert list(drivers) == ["TasmotaPowerDriver", "SerialDriver", "ShellDriver", STRATEGY]
    assert drivers["SerialDriver"] == {"txdelay": 0.01}
    assert drivers["ShellDriver"]["username"] == "r7"


@pytest.mark.parametrize("env,says", [
    ("targets: {a: {}, b: {}}", "must describe one target (has 2)"),
    ("targets:\n  a:\n    resources: {RemotePlace: {name: !template '$LG_NOWHERE'}}",
     "cannot be read: KeyError"),
    ("targets: [", "cannot be read"),
])
def test_a_broken_environment_is_a_clear_lab_error(tmp_path, env, says):
    dt = _write(tmp_path, env)
    with pytest.raises(InfraError) as err:
        environment("p1", {}, dt)
    assert err.value.reason == "EnvironmentInvalid" and says in err.value.message


def test_without_an_environment_the_place_resources_choose_the_drivers():
    dt = DeviceType(name="plain", boot={}, console={"prompt": "# "})
    config = environment("p2", {"NetworkSerialPort": SERIAL, "PDUDaemonPort": {"pdu": "x"}}, dt)
    drivers = _drivers(config)
    assert list(drivers) == ["PDUDaemonDriver", "SerialDriver", "ShellDriver", STRATEGY]
    assert drivers["ShellDriver"]["prompt"] == "# "
    assert environment("p2", {"NetworkSerialPort": SERIAL, "NetworkPowerPort": POWER},
                       dt)["drivers"][0] == {"NetworkPowerDriver": {}}
    with pytest.raises(InfraError) as err:
        environment("p2", {"NetworkSerialPort": SERIAL}, dt)
    assert err.value.reason == "PlaceIncomplete" and "NetworkSerialPort" in err.value.message


def test_a_device_type_without_console_or_environment_is_refused():
    with pytest.raises(ValueError, match="labgrid environment"):
        DeviceType(name="nothing", boot={})
