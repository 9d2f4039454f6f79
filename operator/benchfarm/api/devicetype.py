"""What benchfarm knows about a kind of board, read from `exporters/device-types/*.yaml`.

Board behaviour (boot markers, prompt, clock, rails) lives in these data files, not in code
branches, so a lab adds a board type by adding a file.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)


class Console(_Model):
    prompt: str
    speed: int = 115200


class BootSpec(_Model):
    timeoutSeconds: float = 60
    headline: str = "kernel-to-prompt"
    markers: dict[str, str] = Field(default_factory=dict)
    failures: list[str] = Field(default_factory=list)  # regexes that mean the boot failed
    phases: dict[str, tuple[str, str]] = Field(default_factory=dict)


class Rail(_Model):
    name: str
    voltage: float
    channel: str = ""


class DeviceType(_Model):
    name: str
    arch: str = ""
    description: str = ""
    cpuClockMHz: float | None = None
    gpu: bool = False
    console: Console
    boot: BootSpec
    programs: list[str] | None = None   # None: unknown, any plan may be tried
    rails: list[Rail] = Field(default_factory=list)
    lowPowerModes: list[dict] = Field(default_factory=list)
