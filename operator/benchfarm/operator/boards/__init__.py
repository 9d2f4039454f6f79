"""The board inventory: labgrid places mirrored as Board objects (`inventory`, `places`), their
faults, quarantine and health checks (`health`), and their statuses written (`statuses`).
"""
