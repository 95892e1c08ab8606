"""Version facts of the surface reference (§1.2, §3.1, §3.3, §3.4), one function each, so the
rules read as the reference does. `None` (version unknown from the image tag) is never guessed
into a fact: the callers decide what an unknown version means for them."""

from __future__ import annotations

from vgpu_operator.models.volcano_views import Version

V1_10 = Version(1, 10, 0)
V1_12 = Version(1, 12, 0)
PLUGIN_LAST_HANDSHAKE = Version(1, 12, 0)
PLUGIN_LAST_NAME_FLAGS = Version(1, 11, 99)


def plugin_writes_handshake(v: Version) -> bool:
    """Plugins up to v1.12.0 write `volcano.sh/node-vgpu-handshake`; main removed it."""
    return v <= PLUGIN_LAST_HANDSHAKE


def plugin_writes_mode(v: Version) -> bool:
    """Register records have the 6th (mode) field from plugin v1.10.0."""
    return v >= V1_10


def plugin_takes_name_flags(v: Version) -> bool:
    """Up to v1.11 the kubelet resource names come from --resource-name & co only."""
    return v <= PLUGIN_LAST_NAME_FLAGS


def plugin_flags_always_override(v: Version) -> bool:
    """Up to v1.11 --device-split-count & co override the ConfigMap even when not given."""
    return v <= PLUGIN_LAST_NAME_FLAGS


def plugin_prefixes_names(v: Version) -> bool:
    """From v1.12 names come from the ConfigMap and non-`volcano.sh/` ones get the prefix."""
    return v >= V1_12


def scheduler_requires_handshake(v: Version) -> bool:
    """Volcano ≤ v1.14.2 and v1.15.0 ignore nodes without a fresh handshake annotation;
    v1.14.3+, v1.15.1+ and later replaced it by the allocatable check."""
    if v < Version(1, 14, 3):
        return True
    return Version(1, 15, 0) <= v < Version(1, 15, 1)


def scheduler_requires_default_names(v: Version) -> bool:
    """Volcano v1.14.3+/v1.15.1+ only sees nodes whose allocatable has the hard-coded
    `volcano.sh/vgpu-number/-cores/-memory`, whatever the ConfigMap says."""
    return not scheduler_requires_handshake(v)


def scheduler_rejects_five_fields(v: Version) -> bool:
    """Volcano v1.12.0+ rejects register records without the mode field."""
    return v >= V1_12
