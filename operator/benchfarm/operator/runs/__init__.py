"""A BenchmarkRun from admission to its end: admission (`admission`), the scheduling iteration
(`scheduler`), fair turns across teams (`fairness`), session seats (`seating`), its board session
supervised (`sessions`), and its moves written (`writes`: each checked against
`core.scheduling.lifecycle`'s table first; the ends no run waits for too, `RunEnds`). What the
room needs of the operator is `writes.RunsRuntime`.
"""
