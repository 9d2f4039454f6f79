"""How a board session is started: the launch request and launcher interface (`interface`), a local
process (`launchers`), a Kubernetes Job cold or warm (`jobs`, `warm`), and each session's own
labgrid credentials (`credentials`).
"""
