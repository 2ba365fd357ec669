"""Courier's OpenAPI document: FastAPI's, with the real error shape and media types.

FastAPI documents its own validation error (``{"detail": ...}``), which Courier
never sends: every error is the ``Error`` model, so every operation documents
that instead. The metrics and the event stream are not JSON, and a send needs
a subject unless it is a resource notice; the document says so.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from messaging.web.answers import Error

Json = dict[str, Any]

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
SECURED_ERRORS = {
    "401": "No token, or one Courier does not know",
    "403": "A valid token outside its scope",
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
    for path, operations in doc.get("paths", {}).items():
        for operation in operations.values():
            _errors(operation)
            if path in TEXT_ROUTES:
                _text(operation, *TEXT_ROUTES[path])
    if "SendIn" in schemas:
        # A send needs a subject, unless it is a resource notice (whose text Courier writes).
        schemas["SendIn"]["anyOf"] = [{"required": ["subject"]}, {"required": ["resource_notice"]}]
    return doc


def _errors(operation: Json) -> None:
    responses: Json = operation.setdefault("responses", {})
    wanted = dict(COMMON_ERRORS)
    if operation.get("security"):
        wanted.update(SECURED_ERRORS)
    for status, description in wanted.items():
        responses[status] = {"description": description,
                             "content": {"application/json": {"schema": ERROR_REF}}}


def _text(operation: Json, media_type: str, description: str) -> None:
    for status, response in operation["responses"].items():
        if status.startswith("2"):
            response["description"] = description
            response["content"] = {media_type: {"schema": {"type": "string"}}}
