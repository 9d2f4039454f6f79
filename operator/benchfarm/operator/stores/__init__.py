"""The lab's stores as the operator tends them: each tenant namespace's store credential
(`accounts`), every finished run indexed into the results database (`indexer`), and whether both
are reached (`reachability`).
"""
