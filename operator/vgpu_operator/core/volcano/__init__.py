"""The Volcano/HAMi configuration: what was read (`snapshot`), the operator config's `auto`
values resolved (`discovery`, `workloads`), the renders (`render`), the ConfigMap and workload
writes (`writes`), restarts (`restarts`), adopting a hand-written set-up (`config_adoption`),
`knownMigGeometries` (`geometry`), the plugin's identity, placement and refusals, what each
component version does (`component_versions`), and pods that can never fit (`unschedulable`).
Pure."""
