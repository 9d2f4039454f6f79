"""A BenchmarkRun from admission to its end: admission (`admission`), the scheduling iteration
(`scheduler`), fair turns across teams (`fairness`), session seats (`seating`), its transitions
written (`writes`), the ends no run waits for (`ends`), and its board session supervised
(`sessions`).
"""
