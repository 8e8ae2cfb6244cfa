"""The ffjobs Airflow plugin: the api-server refuses a bad ``ffjobs_pipeline`` conf before a DAG
run exists, and the scheduler writes each ended DAG run's note from what its tasks said
(:mod:`ffjobs.airflow.run_note`).

Airflow checks each Param's JSON schema at trigger time but admits conf keys no Param declares,
and a schema cannot say "a file inside configs/" or "a value the typed config accepts". So a root
middleware reads the body of ``POST /api/v2/dags/<dag>/dagRuns`` (and of a backfill, whose
``dag_run_conf`` becomes each run's conf) for the DAGs in :data:`CHECKED_DAGS`, runs
:func:`ffjobs.airflow.trigger_conf.check_trigger_conf` on the conf and answers 400 naming the
field; the route, and so the DAG run, never happens. The first task runs
the same check, so a run created another way (the CLI ``airflow dags trigger``, the scheduler)
still stops at once. Installed through the ``airflow.plugins`` entry point of the package.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from airflow.plugins_manager import AirflowPlugin

from ffjobs.airflow.run_note import DagRunNoteListener
from ffjobs.config import ConfigError

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

CHECKED_DAGS = frozenset({"ffjobs_pipeline"})
"""DAGs whose conf is the pipeline's Params."""

MAX_BODY_BYTES = 1 << 20
"""A trigger body is a few hundred bytes; a larger one is refused unread (413)."""

_TRIGGER_PATH = re.compile(r"/api/v2/dags/(?P<dag_id>[^/]+)/dagRuns/?")
_BACKFILL_PATH = re.compile(r"/api/v2/backfills(/dry_run)?/?")


class TriggerConfCheck:
    """ASGI middleware: a trigger of a checked DAG with a bad conf gets 400 and no DAG run.

    A request without credentials passes unchecked, so the route answers 401 and an anonymous
    caller learns nothing from the check.
    """

    def __init__(self, app: ASGIApp, dag_ids: frozenset[str] = CHECKED_DAGS):
        self.app, self.dag_ids = app, dag_ids

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self._applies(scope):
            await self.app(scope, receive, send)
            return
        body, complete = await _read_body(receive)
        if not complete:
            await _answer(send, 413, f"request body over {MAX_BODY_BYTES} bytes")
            return
        problem = conf_problem(body, self._dag_id(scope), self.dag_ids)
        if problem is not None:
            await _answer(send, 400, problem)
            return
        await self.app(scope, _replay(body, receive), send)

    def _applies(self, scope: Scope) -> bool:
        if scope.get("type") != "http" or scope.get("method") != "POST":
            return False
        path = scope.get("path", "")
        trigger = _TRIGGER_PATH.fullmatch(path)
        if trigger is None and _BACKFILL_PATH.fullmatch(path) is None:
            return False
        if trigger is not None and trigger["dag_id"] not in self.dag_ids:
            return False
        headers = dict(scope.get("headers") or [])
        return b"authorization" in headers or b"_token=" in headers.get(b"cookie", b"")

    @staticmethod
    def _dag_id(scope: Scope) -> str | None:
        """The DAG a trigger's path names; ``None`` for a backfill (its body names it)."""
        trigger = _TRIGGER_PATH.fullmatch(scope.get("path", ""))
        return trigger["dag_id"] if trigger else None


def conf_problem(body: bytes, dag_id: str | None, dag_ids: frozenset[str]) -> str | None:
    """The one-line reason a trigger's (``dag_id`` given) or a backfill's body carries a conf
    refused, or ``None`` to let it through: another DAG's, or a body that is not JSON (the
    route's to refuse)."""
    from ffjobs.airflow.trigger_conf import check_trigger_conf

    try:
        payload = json.loads(body or b"{}")
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(payload, dict):
        return None
    conf_key = "conf" if dag_id is not None else "dag_run_conf"
    if (dag_id if dag_id is not None else payload.get("dag_id")) not in dag_ids:
        return None
    try:
        check_trigger_conf(payload.get(conf_key) or {})
    except ConfigError as exc:
        return str(exc)
    return None


async def _read_body(receive: Receive) -> tuple[bytes, bool]:
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks), True  # disconnected: the route sees an empty body
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            return b"", False
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks), True


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def _answer(send: Send, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class FfjobsPlugin(AirflowPlugin):
    """Registers :class:`TriggerConfCheck` with the api-server and the DAG run note listener."""

    name = "ffjobs"
    listeners = [DagRunNoteListener()]  # noqa: RUF012 - Airflow reads this class attribute
    fastapi_root_middlewares = [  # noqa: RUF012 - Airflow reads this class attribute
        {"name": "ffjobs trigger conf check", "middleware": TriggerConfCheck}
    ]
