"""openssl speed: throughput per algorithm and block size (KB/s as printed, 1000s of bytes/s),
and sign/verify per second for RSA/DSA/ECDSA/EdDSA.

Three shapes give the same metric names: the human table under a 'type 16 bytes ...' header; the
-multi N table, whose block sizes some versions print only in the children's 'Got: +H:...' lines;
and -mr machine-readable lines ('+H:' sizes, '+F:' bytes/s, '+F2:'/'+F3:'/'+F6:' sign/verify).
"""

from __future__ import annotations

import re2

from benchfarm.errors import ParseError
from benchfarm.suites.base import Metric, Pattern, integer, lines_of, number

SUITE = "openssl"
_HEADER = Pattern(r"^type\s+((?:\d+ bytes\s*)+)$", " bytes")
_PKEY = Pattern(r"^(rsa|dsa)\s+(\d+)\s+bits\s+\S+s\s+\S+s\s+([\d.]+)\s+([\d.]+)", "bits")
_EC = Pattern(r"^\s*\d+\s+bits\s+(ecdsa|EdDSA)\s+\((\w+)\)\s+\S+s\s+\S+s\s+([\d.]+)\s+([\d.]+)", "bits")
# -mr; 'Got: ' marks a -multi child's own report, of which only the sizes are used
_MR_SIZES = Pattern(r"^(?:Got: )?\+H((?::\d+)+)", "+H")
_MR_CIPHER = Pattern(r"^\+F:\d+:([^:]+)((?::[\d.]+)+)$", "+F:")
_MR_PKEY = Pattern(r"^\+F([23]):\d+:(\d+):([\d.]+):([\d.]+)$", "+F2:", "+F3:")
_MR_EDDSA = Pattern(r"^\+F6:\d+:\d+:(\w+):([\d.]+):([\d.]+)$", "+F6:")
_DIGITS = re2.compile(r"\d+")
_MR_PKEY_NAMES = {"2": "rsa", "3": "dsa"}


def parse(text: str, params: dict[str, str] | None = None) -> list[Metric]:
    """One metric per algorithm and block size, two (sign, verify) per public-key algorithm."""
    out: list[Metric] = []
    sizes: list[int] = []
    for i, line in enumerate(lines_of(text), 1):
        s = line.strip()
        if m := _HEADER.match(s) or _MR_SIZES.match(s):
            sizes = [integer(x, SUITE, i) for x in _DIGITS.findall(m.group(1))]
        elif m := _MR_CIPHER.match(s):
            bytes_per_s = [number(v, SUITE, i) for v in m.group(2)[1:].split(":")]
            if not sizes:
                raise ParseError(SUITE, "'+F:' line before any '+H:' line of block sizes", line=i)
            if len(bytes_per_s) != len(sizes):
                raise ParseError(SUITE, f"'+F:' line has {len(bytes_per_s)} values for "
                                        f"{len(sizes)} block sizes of the '+H:' line", line=i)
            out += _throughput(m.group(1), [f"{v / 1000:.2f}" for v in bytes_per_s], sizes, i)
        elif sizes and (row := _table_row(s, len(sizes))):
            out += _throughput(*row, sizes, i)
        elif m := _PKEY.match(s) or _MR_PKEY.match(s):
            kind = _MR_PKEY_NAMES.get(m.group(1), m.group(1))
            out += _sign_verify(f"{kind}{m.group(2)}", m.group(3), m.group(4), i)
        elif m := _EC.match(s):
            out += _sign_verify(f"{m.group(1).lower()}-{m.group(2)}", m.group(3), m.group(4), i)
        elif m := _MR_EDDSA.match(s):
            out += _sign_verify(f"eddsa-{m.group(1)}", m.group(2), m.group(3), i)
        elif s.startswith("+F4:"):
            raise ParseError(SUITE, "a machine-readable ECDSA line ('+F4:') does not name its curve; "
                                    "run ECDSA without -mr", line=i)
    if not out:
        raise ParseError(SUITE, "no throughput table ('type ... bytes', '+H:' sizes) and no "
                                "sign/verify rows")
    return out


_CELL = re2.compile(r"^(\d+(?:\.\d+)?|-?nan|inf)(k?)$")


def _table_row(line: str, n_sizes: int) -> tuple[str, list[str]] | None:
    """'AES-128-GCM  98738.88k ... 10005413.89k' -> ('AES-128-GCM', ['98738.88', ...]). openssl
    prints a figure over 10,000 bytes/s in 1000s ('k'), a smaller one as bytes/s: '0.00', or
    '-nan' when its timer saw no time pass, if no block of that size finished (a loaded board,
    `-seconds 1`), 'inf' when blocks finished in no time it saw (a board seconds after its boot:
    "3293 AES-128-CBC's in 0.00s" while the kernel's random pool came up). A '-nan' or 'inf'
    cell is no figure: '' (that size has no metric this time)."""
    fields = line.split()
    cells = [_CELL.match(v) for v in fields[-n_sizes:]]
    if len(fields) <= n_sizes or not all(cells):
        return None
    return " ".join(fields[:-n_sizes]), [
        "" if m.group(1).endswith(("nan", "inf")) else m.group(1) if m.group(2)
        else f"{float(m.group(1)) / 1000:.2f}" for m in cells if m]


def _throughput(algorithm: str, kb_per_s: list[str], sizes: list[int], line: int) -> list[Metric]:
    algo = algorithm.lower().replace(" ", "-")
    return [Metric(f"openssl-{algo}-{size}B", number(v, SUITE, line), "KB/s", True,
                   {"algorithm": algo, "block": str(size)})
            for size, v in zip(sizes, kb_per_s, strict=False) if v]


def _sign_verify(algo: str, sign: str, verify: str, line: int) -> list[Metric]:
    return [Metric(f"openssl-{algo}-sign", number(sign, SUITE, line), "ops/s"),
            Metric(f"openssl-{algo}-verify", number(verify, SUITE, line), "ops/s")]
