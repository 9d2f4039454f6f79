"""A BenchmarkRun from admission to its end: admission (`admission`), the scheduling iteration
(`scheduler`), fair turns across teams (`fairness`), session seats (`seating`), its transitions
written (`writes`: each move checked against `core.scheduling.lifecycle`'s table, and the ends
no run waits for, `RunEnds`), and its board session supervised
(`sessions`).
"""
