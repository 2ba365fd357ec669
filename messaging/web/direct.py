"""A route whose common case skips FastAPI's per-request machinery: the send.

``POST /v1/messages`` is the request agents make most. FastAPI's handler for
it parses the JSON with the standard library, solves the route's
dependencies (the services, the bearer scheme, the caller) and validates the
body through a type adapter, on every request. ``DirectBodyRoute`` declares
the route as usual (the OpenAPI document, the route index and every error
are FastAPI's), and takes the common case itself: a JSON object in a body
declared ``application/json``, parsed by orjson and validated by the model,
with the caller the gate put in the scope, handed to the same endpoint
function. Anything else (no body, another content type, JSON orjson refuses,
a body that is not an object) goes to FastAPI's own handler, so it is
answered exactly as before. The order of answers is FastAPI's: a body that
is not JSON, then the caller (401, 429), then the body's fields.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import orjson
from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pydantic import BaseModel, ValidationError

from messaging.web.deps import Services, caller, services

JSON_TYPE = "application/json"
# Where FastAPI puts a body's errors.
BODY_LOC = ("body",)

Endpoint = Callable[[Any, Services, Any], Awaitable[Response]]


class DirectBodyRoute(APIRoute):
    """An ``APIRoute`` for ``endpoint(body: Model, svc: Svc, who: Who)``, its common case
    handled directly."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        standard = super().get_route_handler()
        body_params = self.dependant.body_params
        if len(body_params) != 1 or self.dependant.path_params or self.dependant.query_params:
            raise TypeError(f"{self.path}: a direct route takes one body and no parameters")
        model = body_params[0].field_info.annotation
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            raise TypeError(f"{self.path}: a direct route's body is a pydantic model")
        endpoint: Endpoint = self.endpoint

        async def handler(request: Request) -> Response:
            body = await request.body()  # kept on the request: FastAPI's handler reads it again
            content_type = request.headers.get("content-type", "")
            if not body or content_type.split(";")[0].strip().lower() != JSON_TYPE:
                return await standard(request)
            try:
                data = orjson.loads(body)
            except orjson.JSONDecodeError:
                return await standard(request)
            if not isinstance(data, dict):
                return await standard(request)
            svc = await services(request)
            who = await caller(request, None)  # the gate's, as every route's
            try:
                parsed = model.model_validate(data, from_attributes=True)
            except ValidationError as exc:
                raise RequestValidationError(
                    [{**e, "loc": BODY_LOC + tuple(e["loc"])}
                     for e in exc.errors(include_url=False)], body=data) from None
            return await endpoint(parsed, svc, who)

        return handler
