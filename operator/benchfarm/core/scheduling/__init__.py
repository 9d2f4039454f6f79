"""Who gets which board next, and what happens to a run: the queue (`queue`), the order its runs
get boards in (`fairness`), the free boards indexed (`boardindex`), one round's assignments
(`assignment`), a round's decisions (`rounds`), session seats (`seats`), a run's operator-side
states (`lifecycle`), the status patches of its transitions (`transitions`), and the Kubernetes
form of durations (`durations`). Pure.
"""
