"""Data shapes of the CRDs and plans (pydantic, no I/O): what every resource shares (`base`),
a BenchmarkRun (`runs`), a Board (`boards`), the LabPolicy (`labpolicy`), a BoardLease
(`leases`), a campaign (`campaigns`), a Notification (`notifications`), a device type
(`devicetype`), and the CRDs generated from them (`crdgen`)."""
