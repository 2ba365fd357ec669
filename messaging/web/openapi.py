"""Courier's OpenAPI document: FastAPI's, with the real error shape and media types.

FastAPI documents its own validation error (``{"detail": ...}``), which Courier
never sends: every error is the ``Error`` model, so every operation documents
that instead. The metrics and the event stream are not JSON; the main routes
carry request examples; every request body is one typed object (rules across
fields, such as a send's subject-or-notice, are checked by the model and said
in its description), so generated clients get typed methods. Request schemas
carry no ``default``: a field left out takes the server's default, which its
description names; generators that read a default as "always present"
(openapi-typescript's ``defaultNonNullable``, openapi-python-client's
attribute defaults, which it then sends) would otherwise make every
defaulted field required, or send it unasked (a resource notice refuses
``probe: false``).
"""

from __future__ import annotations

from fastapi import FastAPI

from messaging.types import Json
from messaging.web.answers import Error

DESCRIPTION = (
    "Courier carries Markdown messages between the AI agents of one project. "
    "Send `Authorization: Bearer <token>` (operator, project or agent token). "
    "Every error has one shape, `{\"persisted\": false, \"error\": {\"code\", \"message\", "
    "\"details\"}}`, whatever its status. The repository's docs/http-api.md tells the rules "
    "behind each route."
)
ERROR_REF = {"$ref": "#/components/schemas/Error"}
FASTAPI_ERRORS = ("HTTPValidationError", "ValidationError")
# Errors every operation may answer, beside the ones of its own rules.
COMMON_ERRORS = {
    "422": "Invalid argument: `details.field` names the field",
    "429": "Too many requests: see `Retry-After`",
    "default": "Any other error, in the same shape (codes in docs/http-api.md)",
}
# Every route that reads or writes the store may find it down or full.
UNAVAILABLE = ("503", "The store is unreachable (`STORE_UNAVAILABLE`) or full (`STORE_FULL`): "
                      "nothing was stored; retry later")
NO_STORE_ROUTES = {"/healthz", "/readyz"}  # /readyz answers 503 itself, as its own answer
SECURED_ERRORS = {
    "401": "No token, or one Courier does not know",
    "403": "A valid token outside its scope",
}
HANDOFF = {"to": ["Bob"], "subject": "Review the token check in auth.py before Friday's release",
           "body_md": "Please review `auth.py:check_token`.\n\nNext action: review and reply "
                      "with findings.", "importance": "high", "idempotency_key": "review-auth-1"}
NOTICE = {"to": ["Bob"], "idempotency_key": "db-lock-migrate-1",
          "resource_notice": {"resource_id": "db-lock", "phase_id": "migrate:1",
                              "state": "released", "next_action": "retry_admission"}}
# Request examples of the main routes, by (path, method); tests check each against its model.
REQUEST_EXAMPLES: dict[tuple[str, str], Json] = {
    ("/v1/projects", "post"): {"project": {"summary": "A project for a repository",
                                           "value": {"project_key": "/srv/repos/shop",
                                                     "name": "shop"}}},
    ("/v1/projects/{project_id}/agents", "post"): {
        "inbox": {"summary": "An agent that reads its inbox",
                  "value": {"name": "Alice", "transport": {"kind": "inbox"}}},
        "webhook": {"summary": "An agent whose mail is posted to a URL",
                    "value": {"name": "Bob", "transport": {
                        "kind": "webhook", "url": "http://127.0.0.1:9000/hook"}}}},
    ("/v1/messages", "post"): {
        "handoff": {"summary": "A handoff to one agent", "value": HANDOFF},
        "resource_notice": {"summary": "A resource notice: Courier writes the text",
                            "value": NOTICE}},
    ("/v1/messages/{message_id}/reply", "post"): {
        "reply": {"summary": "A reply in the thread, to the sender",
                  "value": {"body_md": "Reviewed: one nit in line 40.",
                            "idempotency_key": "review-auth-1-reply"}}},
    ("/v1/projects/{project_id}/messages", "post"): {
        "human": {"summary": "The project's human writes to an agent",
                  "value": {"to": ["Alice"], "subject": "Stop the deploy: the release is "
                                                        "postponed", "body_md": "Until Monday."}}},
    ("/v1/subscriptions", "post"): {
        "pure": {"summary": "Hear once when Bob is next idle",
                 "value": {"target": "Bob", "ttl_s": 1800}},
        "with_message": {"summary": "Send Bob work now and hear when he is done",
                         "value": {"target": "Bob", "message": {
                             "subject": "Run the migration tests on branch db-v2",
                             "body_md": "Next action: run `make test-db` and reply."}}}},
    ("/v1/agents/me/presence", "put"): {"idle": {"summary": "Done with the turn",
                                                 "value": {"state": "idle"}}},
}
TEXT_ROUTES = {
    "/metrics": ("text/plain", "Prometheus exposition text"),
    "/healthz": ("text/plain", "`ok`"),
    "/v1/agents/me/events": ("text/event-stream",
                             "Server-Sent Events: `message`, `idle_notice` and `delivery`, "
                             "each with an `id` and JSON `data`"),
}


class CourierAPI(FastAPI):
    """FastAPI, with Courier's corrections to the OpenAPI document."""

    def openapi(self) -> Json:
        """The OpenAPI document, built once."""
        if not self.openapi_schema:
            self.openapi_schema = polish(super().openapi())
        return self.openapi_schema


def polish(doc: Json) -> Json:
    """Put Courier's error shape, media types and request rules into FastAPI's document."""
    schemas: Json = doc.setdefault("components", {}).setdefault("schemas", {})
    error_schema = Error.model_json_schema(ref_template="#/components/schemas/{model}")
    schemas.update(error_schema.pop("$defs", {}))
    schemas["Error"] = error_schema
    for name in FASTAPI_ERRORS:
        schemas.pop(name, None)
    for name in _request_schemas(doc):
        for prop in schemas[name].get("properties", {}).values():
            prop.pop("default", None)
    for path, operations in doc.get("paths", {}).items():
        for method, operation in operations.items():
            _errors(operation, uses_store=path not in NO_STORE_ROUTES)
            if path in TEXT_ROUTES:
                _text(operation, *TEXT_ROUTES[path])
            if (path, method) in REQUEST_EXAMPLES:
                body = operation["requestBody"]["content"]["application/json"]
                body["examples"] = REQUEST_EXAMPLES[path, method]
    return doc


def _refs(node: object) -> set[str]:
    """The component schemas ``node`` refers to, by name."""
    if isinstance(node, dict):
        ref = node.get("$ref")
        found = {ref.rsplit("/", 1)[-1]} if isinstance(ref, str) else set()
        return found.union(*(_refs(v) for v in node.values()))
    if isinstance(node, list):
        return set().union(*(_refs(v) for v in node))
    return set()


def _request_schemas(doc: Json) -> set[str]:
    """The component schemas of request bodies, and every schema they use."""
    schemas: Json = doc["components"]["schemas"]
    todo = _refs([op.get("requestBody") for ops in doc.get("paths", {}).values()
                  for op in ops.values()])
    found: set[str] = set()
    while todo:
        name = todo.pop()
        found.add(name)
        todo |= _refs(schemas[name]) - found
    return found


def _errors(operation: Json, *, uses_store: bool) -> None:
    responses: Json = operation.setdefault("responses", {})
    wanted = dict(COMMON_ERRORS)
    if operation.get("security"):
        wanted.update(SECURED_ERRORS)
    if uses_store:
        wanted.update([UNAVAILABLE])
    for status, description in wanted.items():
        responses[status] = {"description": description,
                             "content": {"application/json": {"schema": ERROR_REF}}}


def _text(operation: Json, media_type: str, description: str) -> None:
    for status, response in operation["responses"].items():
        if status.startswith("2"):
            response["description"] = description
            response["content"] = {media_type: {"schema": {"type": "string"}}}
