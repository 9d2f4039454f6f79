"""Who gets which board next, and what happens to a run: the queue (`queue`), a round's decisions
(`rounds`), session seats (`seats`), a run's operator-side states (`lifecycle`), the status
patches of its transitions (`transitions`), and the Kubernetes form of durations (`durations`).
Pure.
"""
