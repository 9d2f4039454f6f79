"""Trust and policy: the operator's signature on what a session executes (`trust`), what software a
namespace may name (`software`), what a board may reach (`boardnet`), who a labgrid client is
(`identity`), what a tenant may read (`redact`), whose a stored document is (`runkey`), and what
a run's output may cost (`budgets`). Pure.
"""
