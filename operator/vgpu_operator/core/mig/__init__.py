"""MIG: the GPU's partitions. The planner (`partition`) turns observed GPUs and a released
configuration into ordered steps; `layout` resolves the target per GPU, `place` places GPU
instances on slices, `verify` checks what the GPUs report after an apply. Pure."""
