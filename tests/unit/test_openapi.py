"""The OpenAPI document tells the truth: Courier's error shape, media types, rules, version."""

from __future__ import annotations

import json
from importlib.metadata import version
from typing import Any

import jsonschema
import pytest
from openapi_spec_validator import validate

from messaging.web.app import create_app

DOC: dict[str, Any] = create_app().openapi()
ERROR_REF = {"$ref": "#/components/schemas/Error"}


def operations() -> list[tuple[str, str, dict[str, Any]]]:
    return [(method.upper(), path, op) for path, ops in DOC["paths"].items()
            for method, op in ops.items()]


def schema_of(name: str) -> dict[str, Any]:
    """A component schema, able to resolve its references."""
    return {"$ref": f"#/components/schemas/{name}", "components": DOC["components"]}


def test_the_document_is_valid_openapi() -> None:
    validate(DOC)


def test_version_is_courier_and_the_api_is_described() -> None:
    assert DOC["info"]["version"] == version("agent-courier")
    assert "error" in DOC["info"]["description"]
    assert all(op.get("description") for _, _, op in operations())


def test_every_error_response_is_couriers_error_shape() -> None:
    assert "HTTPValidationError" not in json.dumps(DOC)
    for method, path, op in operations():
        errors = {s: r for s, r in op["responses"].items() if not s.startswith("2")}
        assert {"422", "default"} <= set(errors), f"{method} {path}"
        for status, response in errors.items():
            if (path, status) == ("/readyz", "503"):
                continue  # "not ready" is an answer of its own, not an error
            assert response["content"]["application/json"]["schema"] == ERROR_REF, (
                f"{method} {path} {status}")


def test_secured_operations_document_401_and_403() -> None:
    for method, path, op in operations():
        if op.get("security"):
            assert {"401", "403"} <= set(op["responses"]), f"{method} {path}"


def test_the_error_schema_accepts_a_real_error_and_refuses_fastapis() -> None:
    real = {"persisted": False, "error": {"code": "NOT_FOUND", "message": "no such path",
                                          "details": None}}
    jsonschema.validate(real, schema_of("Error"))
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"detail": [{"msg": "x"}]}, schema_of("Error"))


@pytest.mark.parametrize(("path", "media_type"), [
    ("/metrics", "text/plain"), ("/v1/agents/me/events", "text/event-stream")])
def test_text_routes_are_not_typed_as_json(path: str, media_type: str) -> None:
    assert list(DOC["paths"][path]["get"]["responses"]["200"]["content"]) == [media_type]


def test_a_send_needs_a_subject_unless_it_is_a_resource_notice() -> None:
    send = schema_of("SendIn")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"to": ["Bob"], "body_md": "hi"}, send)
    jsonschema.validate({"to": ["Bob"], "subject": "Hi"}, send)
    notice = {"resource_id": "db-lock", "phase_id": "p1", "state": "released",
              "next_action": "none"}
    jsonschema.validate({"to": ["Bob"], "resource_notice": notice, "idempotency_key": "k"}, send)


@pytest.mark.parametrize(("method", "path", "status", "model"), [
    ("post", "/v1/projects", "201", "ProjectCreated"),
    ("post", "/v1/projects/{project_id}/agents", "201", "AgentRegistered"),
    ("get", "/v1/projects/{project_id}/agents", "200", "Agents"),
    ("post", "/v1/messages", "201", "Sent"),
    ("post", "/v1/messages", "200", "Sent"),
    ("get", "/v1/agents/me/inbox", "200", "InboxPage"),
    ("get", "/v1/deliveries/{delivery_id}", "200", "Delivery"),
    ("post", "/v1/subscriptions", "201", "Subscription"),
])
def test_core_operations_document_their_success_answer(method: str, path: str, status: str,
                                                       model: str) -> None:
    content = DOC["paths"][path][method]["responses"][status]["content"]
    assert content["application/json"]["schema"] == {"$ref": f"#/components/schemas/{model}"}
    assert DOC["components"]["schemas"][model]["properties"]
