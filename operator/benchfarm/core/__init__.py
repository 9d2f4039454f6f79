"""Pure decisions: queue and scheduling, planning, statistics, regressions. No I/O."""
