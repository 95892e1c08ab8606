"""The operator's pure core: (policies, nodes, observed state) in, typed decisions out; no I/O.

The wings, lowest first (docs/architecture.md draws them and tests/unit/test_structure.py keeps
them so): `mig` (GPU partitions), `nodes` (which policy owns a node and what its one PATCH is),
`volcano` (the Volcano/HAMi configuration: snapshot, renders, writes, restarts), `rollout` (safe
transitions), `rules` (the consistency rules). The modules beside them read across the wings:
`plan` and `observe` (what the operator would do), `cleanup` (what uninstall does), `findings`
and `report` (how findings reach people), `backoff`.
"""
