"""What a result was measured under: the board's conditions around a step, its energy, and the
envelope a measurement must stay inside to count.

The session records, around every suite step, what the board exposes (cpufreq per policy,
thermal zones, throttle counters, load and CPU idle, memory available): a snapshot before, a few
during (sampled on the board, bounded) and one after; the lab's rail monitor samples the board's
power through the step. `StepConditions` is that record as it goes into a step's checkpoint and
`metrics.json` (camelCase, host wall-clock seconds, so it lies on the same axis as the boot
timeline). `Envelope` is what a device type (and a plan, to tighten it) says a valid result needs;
an iteration measured outside it is kept in the raw data, marked invalid with its reasons, left
out of the statistics and measured again (bounded by `retakes`).

One typed definition for the session (which writes it), the results and reports (which read it)
and the history (which indexes it). No I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

MAX_DURING = 120          # snapshots kept from during a step (evenly thinned beyond)
MAX_POWER_SAMPLES = 600   # rail readings kept per step for the timeline (thinned beyond)


class _Doc(BaseModel):
    """A document the session writes and others read back: unknown keys are ignored so an older
    reader reads a newer checkpoint."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore")


class CpuPolicy(_Doc):
    """One cpufreq policy (`/sys/devices/system/cpu/cpufreq/policyN`), frequencies in kHz."""

    curKHz: int | None = None
    minKHz: int | None = None
    maxKHz: int | None = None
    governor: str | None = None


class ThermalZone(_Doc):
    type: str = ""
    tempC: float | None = None


class Snapshot(_Doc):
    """What the board said at one moment. `busy`: the fraction of CPU time not idle since the
    previous snapshot of the same step (from /proc/stat; None for a step's first)."""

    t: float                                             # host wall clock, seconds
    cpufreq: dict[str, CpuPolicy] = Field(default_factory=dict)        # "policy0" -> ...
    thermal: dict[str, ThermalZone] = Field(default_factory=dict)      # "thermal_zone0" -> ...
    throttle: dict[str, int] = Field(default_factory=dict)  # counter name -> count (monotonic)
    # cooling device -> cur_state (0: not cooling; a fan's level is no throttling: not judged)
    cooling: dict[str, int] = Field(default_factory=dict)
    load1: float | None = None
    busy: float | None = None
    memAvailableKiB: int | None = None


class RailEnergy(_Doc):
    energyJ: float
    averageW: float


class StepPower(_Doc):
    """The board's rails through one step: per rail and in total, and the total's samples for
    the timeline ([host wall seconds, mW], thinned to MAX_POWER_SAMPLES)."""

    seconds: float
    energyJ: float
    averageW: float
    rails: dict[str, RailEnergy] = Field(default_factory=dict)
    samples: list[tuple[float, float]] = Field(default_factory=list)


class StepConditions(_Doc):
    """One suite step of one iteration: its conditions, energy and whether it counts."""

    before: Snapshot | None = None
    during: list[Snapshot] = Field(default_factory=list)
    after: Snapshot | None = None
    power: StepPower | None = None
    waitedSeconds: float = 0.0       # waiting for the envelope (cool down, settle) before start
    valid: bool = True
    invalid: list[str] = Field(default_factory=list)   # why not, one reason per line
    retake: int = 0                  # 0: the iteration's first measurement; n: its n-th retake
    # the device type's source is a stand-in the lab drives (ConditionsSource.simulated): what
    # is shown of these conditions says "simulated"
    simulated: bool = False


Fraction = Annotated[float, Field(ge=0, le=1)]


class Envelope(BaseModel):
    """The conditions a result is valid under, and how long to wait for them before a step.

    On a device type (`envelope:` in its YAML) for every plan on such boards; on a plan or one
    of its suites to tighten it (`tightened`: the stricter of each bound). Unset: no bound."""

    model_config = ConfigDict(populate_by_name=True, extra="forbid")

    governor: str | None = Field(None, max_length=32, description=(
        "Every cpufreq policy runs this governor (e.g. performance)."))
    minFrequencyMHz: float | None = Field(None, gt=0, description=(
        "Every cpufreq policy's current frequency at least this, before, during and after."))
    maxTemperatureC: float | None = Field(None, description=(
        "No thermal zone hotter than this, before, during and after."))
    maxBusyBefore: Fraction | None = Field(None, description=(
        "At most this fraction of CPU time busy in the second before the step starts (nothing "
        "else running)."))
    allowThrottling: bool | None = Field(None, description=(
        "false: a throttle counter that moved during the step makes it invalid."))
    waitSeconds: float | None = Field(None, ge=0, le=3600, description=(
        "How long to wait (cool down, go idle) for the envelope before a step; then the step "
        "runs anyway and is judged."))
    settleSeconds: float | None = Field(None, ge=0, le=600, description=(
        "Once inside the envelope, wait this long more before starting."))
    retakes: int | None = Field(None, ge=0, le=10, description=(
        "An iteration measured outside the envelope is measured again up to this many times."))

    def tightened(self, other: Envelope | None) -> Envelope:
        """This envelope with `other`'s bounds applied on top: each bound the stricter of both;
        a governor `other` names replaces this one's (a plan measures under its own)."""
        if other is None:
            return self

        def pick(a: Any, b: Any, strict: Callable[[Any, Any], Any]) -> Any:
            return b if a is None else a if b is None else strict(a, b)

        return Envelope(
            governor=other.governor or self.governor,
            minFrequencyMHz=pick(self.minFrequencyMHz, other.minFrequencyMHz, max),
            maxTemperatureC=pick(self.maxTemperatureC, other.maxTemperatureC, min),
            maxBusyBefore=pick(self.maxBusyBefore, other.maxBusyBefore, min),
            allowThrottling=(None if self.allowThrottling is None and other.allowThrottling is
                             None else bool(self.allowThrottling is not False and
                                            other.allowThrottling is not False)),
            waitSeconds=pick(self.waitSeconds, other.waitSeconds, max),
            settleSeconds=pick(self.settleSeconds, other.settleSeconds, max),
            retakes=pick(self.retakes, other.retakes, max),
        )

    @property
    def bounded(self) -> bool:
        """Whether any bound is set (an empty envelope judges nothing)."""
        return any(v is not None for v in (self.governor, self.minFrequencyMHz,
                                           self.maxTemperatureC, self.maxBusyBefore)) or \
            self.allowThrottling is False
