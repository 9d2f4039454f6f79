"""The session runner: one board session per process (`benchfarm session run`), resumable."""
