"""BoardLeases, a person's hold of a board through the same fair queue as runs: the keeper
(`keeper`), its records (`book`), the grant (`grant`), the lease kept and ended on time
(`tending`), and the queue as a person sees it (`positions`).
"""
