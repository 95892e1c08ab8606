"""The pools' nodes: which policy owns a node (`selection`), what the policy asks of it
(`validate`), the node as read (`facts`), its one PATCH (`patch`, `planner`), what the operator
may write (`ownership`), arriving on a hand-configured node (`adoption`), and what a pass says
about each policy (`status`, `events`). Pure."""
