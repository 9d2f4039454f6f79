"""From a change point to the build that caused it: a bisection's pure decisions.

A bisection measures builds between a good one and a bad one on one board, each against the good
build in interleaved A/B pairs. `judge` says what a step's pairs show (good, bad, unclear, or go
on measuring), `search` which build to measure next and what the verdicts found, and `log` writes
the record `git bisect replay` reads. Pure: the operator feeds it the verdicts of finished steps,
so a resumed bisection takes the same decisions.
"""
