"""Reasons the operator and the session both give for refusing what a tenant asked for.

A run refused at admission (the operator) and a run refused at fetch time (the session, which
trusts nothing it reads from the tenant) must say the same thing the same way: tools and people
match on the reason. One definition here, used by both programs.
"""

from __future__ import annotations

from enum import StrEnum


class Refusal(StrEnum):
    """Why a run may not do what its spec (or its status) asks."""

    #: the namespace may not boot its own software on shared boards (LabPolicy allowSoftware)
    softwareNotAllowed = "SoftwareNotAllowed"
    #: an artifact URL points outside what the namespace may read (its prefix, granted sources,
    #: allow-listed hosts), or at the lab's own or internal addresses
    artifactForbidden = "ArtifactForbidden"
    #: the suites in the run's status are not the ones the operator admitted (signature)
    statusTampered = "StatusNotTrusted"
