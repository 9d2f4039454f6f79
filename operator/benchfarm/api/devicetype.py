"""What benchfarm knows about a kind of board, read from `exporters/device-types/*.yaml`.

Board behaviour (boot markers, prompt, clock, rails) lives in these data files, not in code
branches, so a lab adds a board type by adding a file.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from benchfarm.api.conditions import Envelope


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)


class Console(_Model):
    prompt: str
    speed: int = 115200


class BootSpec(_Model):
    timeoutSeconds: float = 60
    # A boot that fails on the board's side (no prompt in time, a failure pattern, a silent
    # console, a bootloader that does not answer) is power-cycled again this many times before
    # the board is charged, as LAVA's `failure_retry`: the run keeps its board and its queue
    # turn, and the failed attempts are recorded with the boot. 0: the first failure counts.
    retries: int = Field(default=1, ge=0, le=5)
    # A boot whose console, having spoken, falls silent this long before the prompt is hung: it is
    # power-cycled at once (a failed attempt, as a timeout is) instead of waiting out
    # timeoutSeconds. None: no limit. `silenceAfterSeconds` sets another limit from a marker on
    # (e.g. a quiet TFTP transfer after `bootloader`), the latest marker reached deciding.
    silenceSeconds: float | None = Field(default=None, gt=0)
    silenceAfterSeconds: dict[str, float] = Field(default_factory=dict)
    headline: str = "kernel-to-prompt"
    markers: dict[str, str] = Field(default_factory=dict)
    failures: list[str] = Field(default_factory=list)  # regexes that mean the boot failed
    phases: dict[str, tuple[str, str]] = Field(default_factory=dict)


class Rail(_Model):
    """A power rail: its nominal voltage and where its monitor reads it (backend-specific)."""

    name: str
    voltage: float
    channel: str = ""
    model: dict[str, float] = Field(default_factory=dict)  # virtual boards: mW per state
    # sigrok: the current-sense amplifier's transfer, amperes of rail current per volt on the
    # channel (1 / (shunt ohms x amplifier gain))
    ampsPerVolt: float | None = None


class LowPowerMode(_Model):
    """How to put the board into a low-power mode over its console, and how it wakes."""

    name: str
    command: str                       # `{seconds}` is replaced by the sleep duration
    wake: str = "rtc"                  # rtc: the RTC alarm wakes it; serial: a byte on the console
    enterPattern: str = r"PM: suspend entry"
    exitPattern: str = r"PM: suspend exit"
    expectState: str | None = None     # what a state-aware monitor (virtual) must report asleep


class PowerMonitor(_Model):
    """Which rail monitor backend reads this board: virtual, hwmon or sigrok."""

    backend: str = "virtual"
    root: str = "/sys/class/hwmon"     # hwmon: where the INA2xx hwmon directories are
    samplerate: str = "1k"             # sigrok: the instrument's samplerate (sigrok-cli syntax)
    captureSeconds: float = 0.1        # sigrok: how long one capture of a rail lasts


class ConditionsSource(_Model):
    """Where a board of this type shows what it is measured under (api.conditions): the root its
    cpufreq and thermal trees hang from (`{root}/devices/system/cpu/cpufreq/policy*`,
    `{root}/class/thermal/thermal_zone*`, `{root}/class/thermal/cooling_device*`), a command
    that prints more throttle counters (`name count` lines, e.g. a firmware's throttled flags),
    how often the board samples them during a step and how often the lab samples the rails."""

    # each goes into one line of the probe, sent to an interactive shell that takes no line
    # over 1024 characters (`core.readings.conditions.install`)
    root: str = Field(default="/sys", max_length=256)
    throttleCommand: str | None = Field(default=None, max_length=512)
    intervalSeconds: float = Field(default=1.0, ge=0.2, le=60)
    powerSampleHz: float = Field(default=2.0, gt=0, le=50)
    # the tree is a stand-in the lab drives (a virtual board has no cpufreq or thermal zones of
    # its own): the reports say so beside every figure it gave
    simulated: bool = False


class DeviceType(_Model):
    name: str
    arch: str = ""
    description: str = ""
    cpuClockMHz: float | None = None
    gpu: bool = False
    console: Console | None = None      # for a device type without a labgrid environment
    boot: BootSpec
    programs: list[str] | None = None   # None: unknown, any plan may be tried
    rails: list[Rail] = Field(default_factory=list)
    lowPowerModes: list[LowPowerMode] = Field(default_factory=list)
    powerMonitor: PowerMonitor | None = None
    # the labgrid environment YAML of boards of this type (a file beside this one; without it,
    # benchfarm derives one from each place's resources: see benchfarm.lab.environment)
    labgrid: str | None = None
    # the parts of a run's software (api.runs.SOFTWARE_PARTS) these boards can boot: the
    # environment stages them with a TFTPProviderDriver and its bootloader loads them (see
    # benchfarm.lab.deploy); empty: the board boots only what it has
    deploy: list[str] = Field(default_factory=list)
    # what it is measured under (None: nothing recorded but the rails), and what a valid result
    # needs (a plan's suites tighten it)
    conditions: ConditionsSource | None = None
    envelope: Envelope | None = None

    @model_validator(mode="after")
    def _shell_known(self) -> DeviceType:
        if self.console is None and not self.labgrid:
            raise ValueError(f"device type {self.name}: give its labgrid environment (labgrid:) "
                             "or its console's prompt (console.prompt)")
        return self

    @property
    def health_check_seconds(self) -> float:
        """How long a health check of such a board may take: every boot attempt its device
        type allows, a minute besides for acquiring, powering off and reporting."""
        return self.boot.timeoutSeconds * (self.boot.retries + 1) + 60

    def mode(self, name: str) -> LowPowerMode | None:
        return next((m for m in self.lowPowerModes if m.name == name), None)
