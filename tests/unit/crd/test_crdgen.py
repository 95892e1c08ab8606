"""The pydantic JSON Schema -> Kubernetes structural schema converter."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, Any, Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field

from vgpu_operator import contract
from vgpu_operator.crdcheck import check_structural
from vgpu_operator.crdgen import (
    SchemaError,
    cel_string,
    model_schema,
    policy_crd,
    to_structural,
)
from vgpu_operator.models.policy import LabelSelectorRequirement, VGPUNodePolicySpec
from vgpu_operator.models.policy_modes import MigLayout, MigSpec


class Inner(BaseModel):
    """An inner
    object."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"x-kubernetes-validations": [{"rule": "self.a > 0", "message": "m"}]},
    )
    a: int = 1


class Sample(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ref: Inner
    maybe: Inner | None = None
    maybe_int: Annotated[int, Field(ge=1, le=9)] | None = None
    kind: Literal["x", "y"] = "x"
    fixed: Literal["only"] = "only"
    name: Annotated[str, Field(pattern=r"^[a-z]+$", min_length=1, max_length=5)]
    ratio: Annotated[float, Field(gt=0, lt=1)] = 0.5
    tags: dict[str, Annotated[int, Field(ge=0)]] = Field(default_factory=dict)
    keyed: dict[Annotated[str, Field(pattern=r"^k\.[0-9]+$")], str] = Field(default_factory=dict)
    items: list[Inner] = Field(default_factory=list, max_length=3)
    port: int | str = 80
    gpus: Literal["all"] | list[Annotated[int, Field(ge=0, le=7)]] = "all"


def walk(node: Any, path: str = "$") -> Iterator[tuple[str, Any]]:
    if isinstance(node, dict):
        yield path, node
        for k, v in node.items():
            yield from walk(v, f"{path}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from walk(v, f"{path}[{i}]")


@pytest.fixture(scope="module")
def sample() -> dict[str, Any]:
    return model_schema(Sample)


def test_refs_are_inlined_and_titles_dropped(sample: dict[str, Any]) -> None:
    props = sample["properties"]
    assert props["ref"]["type"] == "object"
    assert props["ref"]["properties"]["a"] == {"type": "integer", "default": 1}
    assert props["ref"]["description"] == "An inner object."  # one line
    for path, node in walk(sample):
        assert "$ref" not in node and "$defs" not in node, path
        assert "title" not in node, path


def test_optional_fields_lose_the_null_branch_and_are_not_required(sample: dict[str, Any]) -> None:
    props = sample["properties"]
    assert props["maybe"]["type"] == "object" and "anyOf" not in props["maybe"]
    assert props["maybe_int"] == {"type": "integer", "minimum": 1, "maximum": 9}
    assert "maybe" not in sample["required"] and "maybe_int" not in sample["required"]
    for path, node in walk(sample):
        assert node.get("type") != "null", path
        assert "nullable" not in node, path
        assert node.get("default", 0) is not None, path


def test_literals_become_enums_and_const_a_one_value_enum(sample: dict[str, Any]) -> None:
    assert sample["properties"]["kind"] == {"type": "string", "enum": ["x", "y"], "default": "x"}
    assert sample["properties"]["fixed"] == {"type": "string", "enum": ["only"], "default": "only"}
    assert not any("const" in node for _, node in walk(sample))


def test_string_and_number_constraints(sample: dict[str, Any]) -> None:
    assert sample["properties"]["name"] == {
        "type": "string",
        "minLength": 1,
        "maxLength": 5,
        "pattern": "^[a-z]+$",
    }
    ratio = sample["properties"]["ratio"]
    assert ratio["minimum"] == 0 and ratio["exclusiveMinimum"] is True
    assert ratio["maximum"] == 1 and ratio["exclusiveMaximum"] is True


def test_dicts_become_additional_properties(sample: dict[str, Any]) -> None:
    tags = sample["properties"]["tags"]
    assert tags == {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0}}


def test_key_patterns_become_a_cel_rule(sample: dict[str, Any]) -> None:
    keyed = sample["properties"]["keyed"]
    assert keyed["additionalProperties"] == {"type": "string"}
    assert "patternProperties" not in keyed
    (rule,) = keyed["x-kubernetes-validations"]
    assert rule["rule"] == r"self.all(k, k.matches('^k\\.[0-9]+$'))"


def test_model_cel_rules_are_carried_into_arrays(sample: dict[str, Any]) -> None:
    items = sample["properties"]["items"]
    assert items["maxItems"] == 3
    assert items["items"]["x-kubernetes-validations"] == [{"rule": "self.a > 0", "message": "m"}]


def test_int_or_string_union(sample: dict[str, Any]) -> None:
    port = sample["properties"]["port"]
    assert port["x-kubernetes-int-or-string"] is True
    assert port["anyOf"] == [{"type": "integer"}, {"type": "string"}]
    assert port["default"] == 80 and "type" not in port


def test_mixed_union_becomes_typeless_with_per_type_validations(sample: dict[str, Any]) -> None:
    gpus = sample["properties"]["gpus"]
    assert gpus == {
        "default": "all",
        "pattern": "^(all)$",
        "items": {"type": "integer", "minimum": 0, "maximum": 7},
        "x-kubernetes-preserve-unknown-fields": True,
    }


def test_unions_without_a_structural_form_are_refused() -> None:
    class Bad(BaseModel):
        x: Inner | list[int]  # object | array

    class Twice(BaseModel):
        y: Literal["a"] | Annotated[str, Field(pattern="^b")]

    for model in (Bad, Twice):
        with pytest.raises(SchemaError):
            model_schema(model)


def test_unknown_keywords_are_refused() -> None:
    with pytest.raises(SchemaError, match="prefixItems"):
        to_structural({"type": "array", "prefixItems": [{"type": "string"}]})


def test_cel_string_escapes() -> None:
    assert cel_string(r"^a\.b'c$") == r"'^a\\.b\'c$'"


def test_every_model_cel_rule_is_in_the_crd() -> None:
    crd = policy_crd()
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    in_crd = {r["rule"] for _, n in walk(schema) for r in n.get("x-kubernetes-validations", [])}
    for model in (VGPUNodePolicySpec, MigSpec, MigLayout, LabelSelectorRequirement):
        extra: Any = model.model_config.get("json_schema_extra")
        assert isinstance(extra, dict)
        for rule in extra["x-kubernetes-validations"]:
            assert rule["rule"] in in_crd


def test_crd_shape() -> None:
    crd = policy_crd()
    spec = crd["spec"]
    assert crd["metadata"]["name"] == "vgpunodepolicies.vgpu.volcano.sh"
    assert spec["group"] == contract.GROUP and spec["scope"] == "Cluster"
    assert spec["names"]["shortNames"] == ["vnp"] and spec["names"]["categories"] == ["vgpu"]
    (version,) = spec["versions"]
    assert version["name"] == "v1alpha1" and version["served"] and version["storage"]
    assert version["subresources"] == {"status": {}}
    columns = {c["name"]: c for c in version["additionalPrinterColumns"]}
    assert {"Mode", "Matched", "Ready", "Age", "Priority", "Suspended", "Status"} <= set(columns)
    assert columns["Matched"]["jsonPath"] == ".status.matchedNodes"
    assert columns["Status"]["jsonPath"] == '.status.conditions[?(@.type=="Ready")].status'
    assert columns["Age"]["type"] == "date"
    root = version["schema"]["openAPIV3Schema"]
    assert root["required"] == ["spec"]
    status = root["properties"]["status"]["properties"]
    assert set(status) == {
        "observedGeneration",
        "conditions",
        "matchedNodes",
        "readyNodes",
        "problemNodes",
    }
    condition = status["conditions"]["items"]["properties"]
    assert set(condition) == {
        "type",
        "status",
        "reason",
        "message",
        "observedGeneration",
        "lastTransitionTime",
    }
    assert status["conditions"]["x-kubernetes-list-map-keys"] == ["type"]


def test_no_json_schema_leftovers_anywhere_in_the_crd() -> None:
    schema = policy_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for path, node in walk(schema):
        if path.endswith(".properties"):
            continue  # a map of field names, not a schema node
        assert not {"$ref", "$defs", "title", "const", "patternProperties"} & set(node), path
        for key in ("anyOf", "oneOf"):
            assert all(b.get("type") != "null" for b in node.get(key, [])), path
        assert node.get("additionalProperties") is not False, path
    assert check_structural(schema) == []
