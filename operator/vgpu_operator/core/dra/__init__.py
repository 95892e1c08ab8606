"""Dynamic Resource Allocation through NVIDIA's DRA driver: the driver's names (`driver`) and
pure checks of what a cluster needs before GPUs can be handed out through ResourceClaims
(`prerequisites`)."""
