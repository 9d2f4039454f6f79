"""The operator: a scheduler runtime for the lab's boards, between kopf's watches and the sessions
that drive the boards (it never drives one itself: `benchfarm.session` does, in its own process).

A BenchmarkRun's phases and the moves between them (`core.scheduling.lifecycle`, the table the
operator checks every move against before it writes one; `core.scheduling.transitions` builds
each patch):

                 admit                launch (a round: seated, or on standby)
      (new) ───────────> Pending ────────────────> Running ── go-ahead, relay, resume ─┐
        │                 │  │  ^                   │  │  ^                             │
        │ refuse          │  │  └──── requeue ──────┘  │  └─────────────────────────────┘
        v                 │  │   (Busy, or a fault      │
      Failed              │  │    not the run's)        │ its session: succeed, fail-own,
            cancel-queued │  │ queue-timeout            │   cancel-own (or a hand-back)
                          v  v                          │ the operator: fail, cancel-ended
                  Cancelled  Failed                     v
                                            Succeeded | Failed | Cancelled ── ttl ──> deleted

Meanwhile the operator's own decision about a run on its way to the API server is its in-flight
mark (`lifecycle.InFlight`: a launch seated or on standby, a go-ahead), one at a time.

The rooms, each a package that knows only those below it (pyproject.toml's import contracts):

- at the top, the modules that know kopf and the leader Lease: `main` (lead, then run kopf),
  `handlers` (a few lines each: hand the object to the runtime), `leader`; `runtime` builds every
  part and hands itself to each, typed by the one Protocol its room declares; `campaigns` makes
  and follows a BenchmarkCampaign's runs;
- `runs`: a run from admission to its end: admission, the scheduling iteration and its rounds,
  fair turns, session seats, its moves written (`runs.writes`: one place for what happens to a
  run next), its sessions supervised;
- `boards`: the inventory of labgrid places as Boards, their faults, quarantine, health checks
  and statuses;
- `leases`: a person's BoardLease, through the same queue as runs: granted, kept, ended;
- `notifications`: what happened, matched to the Notifications in force and delivered from a
  durable outbox;
- `stores`: each team's store credential, finished runs indexed into the results database, and
  whether both answer;
- `launch`: how a session is started (a local process, a Kubernetes Job cold or warm) and its
  own labgrid credentials;
- `state`: what the operator knows (the records of runs, boards, leases) and its one writer, the
  owner thread; the thread pools and the metrics.
"""
