"""openssl speed: throughput per algorithm and block size (KB/s as printed, 1000s of bytes/s),
and sign/verify per second for RSA/ECDSA/EdDSA; -multi output has the same shape."""

from __future__ import annotations

import re

from ..errors import ParseError
from .base import Metric, lines_of, number

SUITE = "openssl"
_HEADER = re.compile(r"^type\s+((?:\d+ bytes\s*)+)$")
_PKEY = re.compile(r"^(rsa|dsa)\s+(\d+)\s+bits\s+\S+s\s+\S+s\s+([\d.]+)\s+([\d.]+)")
_EC = re.compile(r"^\s*\d+\s+bits\s+(ecdsa|EdDSA)\s+\((\w+)\)\s+\S+s\s+\S+s\s+([\d.]+)\s+([\d.]+)")


def parse(text: str, params: dict[str, str] | None = None) -> list[Metric]:
    out: list[Metric] = []
    sizes: list[int] = []
    for i, line in enumerate(lines_of(text), 1):
        s = line.rstrip()
        if m := _HEADER.match(s.strip()):
            sizes = [int(x) for x in re.findall(r"(\d+) bytes", m.group(1))]
            continue
        if sizes:
            fields = s.split()
            values = fields[-len(sizes):] if len(fields) > len(sizes) else []
            if values and all(v.endswith("k") for v in values):
                algo = " ".join(fields[:-len(sizes)]).lower().replace(" ", "-")
                for size, v in zip(sizes, values):
                    out.append(Metric(f"openssl-{algo}-{size}B", number(v[:-1], SUITE, i), "KB/s",
                                      True, {"algorithm": algo, "block": str(size)}))
                continue
        if m := _PKEY.match(s.strip()):
            algo = f"{m.group(1)}{m.group(2)}"
            out.append(Metric(f"openssl-{algo}-sign", number(m.group(3), SUITE, i), "ops/s"))
            out.append(Metric(f"openssl-{algo}-verify", number(m.group(4), SUITE, i), "ops/s"))
        elif m := _EC.match(s):
            algo = f"{m.group(1).lower()}-{m.group(2)}"
            out.append(Metric(f"openssl-{algo}-sign", number(m.group(3), SUITE, i), "ops/s"))
            out.append(Metric(f"openssl-{algo}-verify", number(m.group(4), SUITE, i), "ops/s"))
    if not out:
        raise ParseError(SUITE, "no throughput table ('type ... bytes') and no sign/verify rows")
    return out
