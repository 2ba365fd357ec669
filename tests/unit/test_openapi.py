"""The OpenAPI document tells the truth: Courier's error shape, media types, rules, version."""

from __future__ import annotations

import json
from importlib.metadata import version
from typing import Any

import jsonschema
import pydantic
import pytest
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute, iter_route_contexts
from openapi_spec_validator import validate
from pydantic_core import PydanticUndefined

from messaging import models
from messaging.models import SendIn
from messaging.web.app import create_app
from messaging.web.deps import caller
from messaging.web.openapi import REQUEST_EXAMPLES

APP = create_app()
DOC: dict[str, Any] = APP.openapi()
ERROR_REF = {"$ref": "#/components/schemas/Error"}
MODELS = {name: model for name, model in vars(models).items()
          if isinstance(model, type) and issubclass(model, pydantic.BaseModel)}


def operations() -> list[tuple[str, str, dict[str, Any]]]:
    return [(method.upper(), path, op) for path, ops in DOC["paths"].items()
            for method, op in ops.items()]


def json_answers() -> list[Any]:
    """Every documented 2xx answer with a body that is not text, one test case each."""
    cases = []
    for method, path, op in operations():
        for status, response in op["responses"].items():
            media = response.get("content", {})
            if status.startswith("2") and status != "204" and not any(
                    t.startswith("text/") for t in media):
                cases.append(pytest.param(media, id=f"{method} {path} {status}"))
    return cases


def calls(dependant: Dependant) -> set[Any]:
    """Everything a route depends on, directly or through other dependencies."""
    found = set()
    for sub in dependant.dependencies:
        found |= {sub.call, *calls(sub)}
    return found


def token_operations() -> set[tuple[str, str]]:
    """(METHOD, path) of every documented operation that reads the caller's token."""
    return {(method, str(context.path_format))
            for context in iter_route_contexts(APP.routes)
            if isinstance(route := context.original_route, APIRoute) and route.include_in_schema
            and caller in calls(route.dependant) for method in route.methods}


def request_schemas() -> set[str]:
    """The component schemas request bodies use, directly or nested."""
    names: set[str] = set()
    todo = [op["requestBody"] for _, _, op in operations() if "requestBody" in op]
    while todo:
        node = todo.pop()
        if isinstance(node, dict):
            ref = node.get("$ref", "").rsplit("/", 1)[-1]
            if ref and ref not in names:
                names.add(ref)
                todo.append(DOC["components"]["schemas"][ref])
            todo.extend(node.values())
        elif isinstance(node, list):
            todo.extend(node)
    return names


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
        errors = {s: r for s, r in op["responses"].items() if not s.startswith(("2", "3"))}
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
    # The rule is the model's and the description's, not a top-level anyOf.
    assert "subject" in DOC["components"]["schemas"]["SendIn"]["description"]
    with pytest.raises(pydantic.ValidationError) as refused:
        SendIn.model_validate({"to": ["Bob"], "body_md": "hi"})
    assert [e["loc"] for e in refused.value.errors()] == [("subject",)]
    SendIn.model_validate({"to": ["Bob"], "subject": "Hi"})
    notice = {"resource_id": "db-lock", "phase_id": "p1", "state": "released",
              "next_action": "none"}
    SendIn.model_validate({"to": ["Bob"], "resource_notice": notice, "idempotency_key": "k"})


def test_every_request_body_is_one_typed_object() -> None:
    bodies = [(method, path, op["requestBody"]["content"]["application/json"]["schema"])
              for method, path, op in operations() if "requestBody" in op]
    assert ("POST", "/v1/messages") in {(m, p) for m, p, _ in bodies}
    for method, path, ref in bodies:
        schema = DOC["components"]["schemas"][ref["$ref"].rsplit("/", 1)[-1]]
        assert schema["type"] == "object" and schema["properties"], f"{method} {path}"
        assert not {"anyOf", "oneOf", "allOf"} & set(schema), f"{method} {path}"


def test_request_schemas_carry_no_default_and_describe_the_server_s() -> None:
    # A generator that reads a default as "always present" would make the field required
    # (openapi-typescript) or send it unasked (openapi-python-client): the description
    # says what the server does with a field left out.
    for name, model in MODELS.items():
        schema = DOC["components"]["schemas"].get(name)
        if schema is None or name not in request_schemas():
            continue
        for field, prop in schema["properties"].items():
            assert "default" not in prop, (name, field)
            info = model.model_fields[field]
            if info.default not in (None, PydanticUndefined):
                assert "default" in prop.get("description", ""), (name, field)
        assert set(schema.get("required", [])) == {
            f for f, info in model.model_fields.items() if info.is_required()}, name


def test_resource_notice_fields_list_their_values_and_form() -> None:
    notice = DOC["components"]["schemas"]["ResourceNoticeIn"]["properties"]
    assert notice["state"]["enum"] == ["released", "cancelled"]
    assert notice["next_action"]["enum"] == ["none", "retry_admission", "drop_dependency"]
    assert all(notice[f]["pattern"] and notice[f]["description"]
               for f in ("resource_id", "phase_id"))


def test_every_send_field_is_described() -> None:
    for name in ("SendIn", "ReplyIn", "SubscriptionIn", "SubscriptionMessageIn",
                 "ResourceNoticeIn", "PresenceIn"):
        for field, prop in DOC["components"]["schemas"][name]["properties"].items():
            assert prop.get("description"), (name, field)


@pytest.mark.parametrize(("path", "method"), sorted(REQUEST_EXAMPLES))
def test_request_examples_are_valid_requests(path: str, method: str) -> None:
    content = DOC["paths"][path][method]["requestBody"]["content"]["application/json"]
    model = MODELS[content["schema"]["$ref"].rsplit("/", 1)[-1]]
    assert content["examples"]
    for example in content["examples"].values():
        model.model_validate_json(json.dumps(example["value"]))


def test_store_failures_are_documented_where_they_can_happen() -> None:
    for method, path, op in operations():
        if path not in ("/healthz", "/readyz"):
            assert "STORE_UNAVAILABLE" in op["responses"]["503"]["description"], (method, path)
    assert "503" not in DOC["paths"]["/healthz"]["get"]["responses"]


@pytest.mark.parametrize("media", json_answers())
def test_every_json_answer_documents_a_schema_with_fields(media: dict[str, Any]) -> None:
    schema = media["application/json"]["schema"]
    assert schema, "an empty schema says nothing of the answer"
    name = schema["$ref"].rsplit("/", 1)[-1]
    assert DOC["components"]["schemas"][name]["properties"]


def test_the_security_scheme_is_an_http_bearer_token() -> None:
    schemes = DOC["components"]["securitySchemes"]
    assert {(s["type"], s["scheme"]) for s in schemes.values()} == {("http", "bearer")}


def test_every_operation_that_reads_a_token_lists_the_bearer_scheme() -> None:
    (bearer,) = DOC["components"]["securitySchemes"]
    needs = token_operations()
    assert {(m, p) for m, p, _ in operations() if p.startswith("/v1/")} <= needs
    listed = {(m, p) for m, p, op in operations() if op.get("security") == [{bearer: []}]}
    assert listed == needs


@pytest.mark.parametrize(("method", "path", "status", "model"), [
    ("post", "/v1/projects", "201", "ProjectCreated"),
    ("post", "/v1/projects/{project_id}/agents", "201", "AgentRegistered"),
    ("get", "/v1/projects/{project_id}/agents", "200", "Agents"),
    ("post", "/v1/messages", "201", "Sent"),
    ("post", "/v1/messages", "200", "Sent"),
    ("get", "/v1/agents/me/inbox", "200", "InboxPage"),
    ("get", "/v1/deliveries/{delivery_id}", "200", "Delivery"),
    ("post", "/v1/subscriptions", "201", "Subscription"),
    ("post", "/v1/projects/{project_id}/agents/{agent_id}/token", "201", "AgentRegistered"),
    ("get", "/v1/projects/{project_id}", "200", "Project"),
    ("put", "/v1/projects/{project_id}/lane", "200", "Project"),
    ("delete", "/v1/projects/{project_id}/lane", "200", "Project"),
    ("put", "/v1/projects/{project_id}/names/{name}", "200", "NameAllowed"),
    ("get", "/v1/projects/{project_id}/names", "200", "Names"),
    ("delete", "/v1/projects/{project_id}/names/{name}", "200", "NameEnded"),
    ("get", "/v1/projects/{project_id}/held", "200", "Held"),
    ("post", "/v1/deliveries/{delivery_id}/release", "200", "Delivery"),
    ("post", "/v1/deliveries/{delivery_id}/decline", "200", "Delivery"),
    ("post", "/v1/projects/{project_id}/messages", "201", "Sent"),
    ("post", "/v1/projects/{project_id}/messages", "200", "Sent"),
    ("get", "/v1/projects/{project_id}/human/inbox", "200", "InboxPage"),
    ("get", "/v1/threads/{thread_id}/rendered", "200", "RenderedThread"),
])
def test_core_operations_document_their_success_answer(method: str, path: str, status: str,
                                                       model: str) -> None:
    content = DOC["paths"][path][method]["responses"][status]["content"]
    assert content["application/json"]["schema"] == {"$ref": f"#/components/schemas/{model}"}
    assert DOC["components"]["schemas"][model]["properties"]
