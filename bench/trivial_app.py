"""The ceiling: a FastAPI app that does nothing, served exactly as the API is.

``POST /v1/messages`` reads the body and answers a small JSON (the admission
baseline). ``POST /publish`` also publishes one no-op Celery task per request,
with Courier's Celery settings (the end-to-end baseline).
"""

from __future__ import annotations

import uuid

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse

from bench.noop_app import NOOP_QUEUE, STAMP_TASK
from bench.noop_app import app as celery_app

# With the framework's per-request OpenTelemetry checks off, as Courier's API runs.
app = FastAPI(title="bench-trivial",
              telemetry={"tracing": False, "metrics": False, "logs": False})


@app.get("/healthz")
async def healthz() -> PlainTextResponse:
    """The process is up."""
    return PlainTextResponse("ok\n")


@app.post("/v1/messages", status_code=201)
async def send(request: Request) -> JSONResponse:
    """Take the body, answer at once."""
    await request.body()
    return JSONResponse({"persisted": True}, status_code=201)


@app.post("/publish", status_code=201)
async def publish(request: Request) -> JSONResponse:
    """Take the body, publish one no-op task, answer its id."""
    await request.body()
    stamp_id = uuid.uuid4().hex
    celery_app.send_task(STAMP_TASK, args=[stamp_id], queue=NOOP_QUEUE, retry=False)
    return JSONResponse({"id": stamp_id}, status_code=201)
