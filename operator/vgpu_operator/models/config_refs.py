"""The building blocks of the operator configuration: the strict base model, the validated
field types (namespaces, object names, data keys, extended resource names), `auto`, and the
references to the objects and resource names the operator, Volcano and HAMi must agree on
(`ConfigMapRef`, `WorkloadRef`, `ResourceNames`)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
CONFIGMAP_KEY = r"^[-._a-zA-Z0-9]+$"
# An extended resource name: `<domain>/<name>` (kubelet rejects names without a domain).
RESOURCE_NAME = (
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)

# A value resolved from the cluster at start (core.volcano.discovery) instead of written here.
AUTO = "auto"
AUTO_RESOURCE_NAME = rf"^(?:{AUTO}$|{RESOURCE_NAME[1:]})"

DEFAULT_COUNT_NAME = "volcano.sh/vgpu-number"
DEFAULT_MEMORY_NAME = "volcano.sh/vgpu-memory"
DEFAULT_MEMORY_PERCENTAGE_NAME = "volcano.sh/vgpu-memory-percentage"
DEFAULT_CORES_NAME = "volcano.sh/vgpu-cores"


def fix_hint(text: str) -> dict[str, Any]:
    """Attach the fix a person should apply when this field is invalid."""
    return {"fix": text}


def cross_field_error(subpath: str, problem: str, fix: str) -> PydanticCustomError:
    """A cross-field error: `subpath` continues the location of the model that raises it."""
    return PydanticCustomError(
        "operator_config", "{problem}", {"problem": problem, "fix": fix, "subpath": subpath}
    )


class ConfigModel(BaseModel):
    """A section of the configuration: unknown keys refused, set by alias or field name, frozen."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


Namespace = Annotated[
    str,
    Field(
        pattern=DNS_LABEL,
        max_length=63,
        json_schema_extra=fix_hint("use a namespace name: lower-case letters, digits and '-'"),
    ),
]
ObjectName = Annotated[
    str,
    Field(
        pattern=DNS_SUBDOMAIN,
        max_length=253,
        json_schema_extra=fix_hint("use an object name: lower-case letters, digits, '-' and '.'"),
    ),
]
DataKey = Annotated[
    str,
    Field(
        pattern=CONFIGMAP_KEY,
        max_length=253,
        json_schema_extra=fix_hint("use a ConfigMap data key: letters, digits, '-', '_' and '.'"),
    ),
]
ResourceName = Annotated[
    str,
    Field(
        pattern=AUTO_RESOURCE_NAME,
        max_length=317,
        json_schema_extra=fix_hint(
            "use an extended resource name '<domain>/<name>', e.g. volcano.sh/vgpu-number, "
            "or 'auto' (resolved from the cluster)"
        ),
    ),
]


def _all_auto(data: Any, fields: tuple[str, ...]) -> Any:
    """`auto` for a whole reference stands for `auto` in each of its fields."""
    return dict.fromkeys(fields, AUTO) if data == AUTO else data


def auto_paths(model: BaseModel, prefix: str) -> list[str]:
    """The aliases (dotted, under `prefix`) of the fields of `model` that are `auto`."""
    out = []
    for name, info in type(model).model_fields.items():
        if getattr(model, name) == AUTO:
            out.append(f"{prefix}.{info.alias or name}")
    return out


class ConfigMapRef(ConfigModel):
    namespace: Namespace
    name: ObjectName
    key: DataKey

    @model_validator(mode="before")
    @classmethod
    def _auto(cls, data: Any) -> Any:
        return _all_auto(data, ("namespace", "name", "key"))

    def ref(self) -> tuple[str, str]:
        return (self.namespace, self.name)

    def is_auto(self) -> bool:
        return AUTO in (self.namespace, self.name, self.key)


class WorkloadRef(ConfigModel):
    """A DaemonSet or Deployment, and (optionally) which of its containers is the one that
    matters; unset: the container whose image or name says so, else the first."""

    namespace: Namespace
    name: ObjectName
    container: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _auto(cls, data: Any) -> Any:
        return _all_auto(data, ("namespace", "name", "container"))

    def is_auto(self) -> bool:
        return AUTO in (self.namespace, self.name, self.container)


class ResourceNames(ConfigModel):
    count: ResourceName = DEFAULT_COUNT_NAME
    memory: ResourceName = DEFAULT_MEMORY_NAME
    memory_percentage: ResourceName = Field(
        default=DEFAULT_MEMORY_PERCENTAGE_NAME, alias="memoryPercentage"
    )
    cores: ResourceName = DEFAULT_CORES_NAME

    @model_validator(mode="before")
    @classmethod
    def _auto(cls, data: Any) -> Any:
        return _all_auto(data, ("count", "memory", "memoryPercentage", "cores"))

    @model_validator(mode="after")
    def _distinct(self) -> ResourceNames:
        names = [n for n in self.names() if n != AUTO]  # resolved ones are checked again
        if len(set(names)) != len(names):
            raise cross_field_error(
                "",
                "the four resource names must differ (count, memory, memoryPercentage, cores)",
                "give each its own name",
            )
        return self

    def names(self) -> tuple[str, str, str, str]:
        return (self.count, self.memory, self.memory_percentage, self.cores)

    def is_default(self) -> bool:
        return self == ResourceNames()
