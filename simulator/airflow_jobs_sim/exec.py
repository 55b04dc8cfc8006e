"""``pods/exec`` over the WebSocket channel protocol, for containers that run as local processes.

The protocol is the API server's and kubelet's (kubernetes release-1.32
``staging/src/k8s.io/apimachinery/pkg/util/remotecommand/constants.go`` and
``staging/src/k8s.io/apiserver/pkg/util/wsstream/conn.go``): subprotocols ``v5.channel.k8s.io`` and
``v4.channel.k8s.io``; every message starts with its channel byte (0 stdin, 1 stdout, 2 stderr, 3 error,
4 resize; v5 adds 255, close: the next byte names the channel the client closes). The error channel
carries one ``Status`` when the command ends: ``Success``, or ``Failure`` with reason ``NonZeroExitCode``
and the exit code as the ``ExitCode`` cause (``pkg/kubelet/cri/streaming/remotecommand/websocket.go``
and ``httpstream.go`` ``writeStatus``).

Only exec mode can serve it: the command runs as a local process in the container's working directory
with the container's environment (its ``PATH`` included, so its ``getent``/``nslookup``/``pgrep`` are the
kubelet's). A container that follows a scenario has no process to exec into, and the answer says so.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from aiohttp import WSMsgType, web

from airflow_jobs_sim.errors import ApiError
from airflow_jobs_sim.processes import rewrite, with_default_signals

log = logging.getLogger(__name__)

PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io")
STDIN, STDOUT, STDERR, ERROR, RESIZE, CLOSE = 0, 1, 2, 3, 4, 255


def exit_status(argv: list[str], code: int) -> dict:
    """The Status the error channel carries for a command that ended with ``code``."""
    if code == 0:
        return {"metadata": {}, "status": "Success"}
    shown = " ".join(argv)
    return {
        "metadata": {},
        "status": "Failure",
        "message": f"command terminated with non-zero exit code: error executing command [{shown}], exit code {code}",
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
    }


async def serve_exec(
    request: web.Request, store: Any, controllers: Any, namespace: str, name: str
) -> web.StreamResponse:
    """Answer ``GET``/``POST /api/v1/namespaces/NS/pods/NAME/exec``."""
    query = request.query
    argv = query.getall("command", [])
    pod = store.get("pods", name, namespace=namespace)  # 404 as the real server
    spec = pod.get("spec") or {}
    names = [c["name"] for c in (spec.get("initContainers") or []) + (spec.get("containers") or [])]
    container = query.get("container") or (names[0] if len(names) == 1 else "")
    if not container:
        raise ApiError(
            400,
            "BadRequest",
            f"a container name must be specified for pod {name}, choose one of: {names}",
        )
    if container not in names:
        raise ApiError(400, "BadRequest", f"container {container} is not valid for pod {name}")
    if not argv:
        raise ApiError(400, "BadRequest", "you must specify at least 1 command")
    if pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
        raise ApiError(
            400,
            "BadRequest",
            f"cannot exec into a container in a completed pod; current phase is {pod['status']['phase']}",
        )
    kubelet = getattr(controllers, "kubelet", None)
    target = kubelet.exec_target(pod, container) if kubelet is not None else None
    if target is None:
        raise ApiError(
            400,
            "BadRequest",
            f"unable to upgrade connection: container {container} of pod {name} runs no local process (the "
            "simulator serves pods/exec in exec mode, for containers with a command)",
        )
    if request.headers.get("Upgrade", "").lower() != "websocket":
        raise ApiError(400, "BadRequest", "Upgrade request required")
    ws = web.WebSocketResponse(protocols=PROTOCOLS)
    await ws.prepare(request)
    v5 = ws.ws_protocol == PROTOCOLS[0]
    want_stdin = query.get("stdin") in ("1", "true", "True")
    env, cwd, mounts = target
    argv = list(rewrite(argv, mounts))
    try:
        process = await asyncio.create_subprocess_exec(
            *with_default_signals(argv),
            stdin=asyncio.subprocess.PIPE if want_stdin else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            cwd=cwd,
        )
    except OSError as exc:
        message = (
            "OCI runtime exec failed: exec failed: unable to start container process: exec: "
            f'"{argv[0]}": {exc.strerror}: unknown'
        )
        await ws.send_bytes(
            bytes([ERROR]) + json.dumps({"metadata": {}, "status": "Failure", "message": message}).encode()
        )
        await ws.close()
        return ws

    async def pump(stream: asyncio.StreamReader | None, channel: int) -> None:
        assert stream is not None
        while chunk := await stream.read(65536):
            await ws.send_bytes(bytes([channel]) + chunk)

    async def feed() -> None:
        async for msg in ws:
            if msg.type not in (WSMsgType.BINARY, WSMsgType.TEXT):
                continue
            data = msg.data if isinstance(msg.data, bytes) else msg.data.encode()
            if not data:
                continue
            channel, payload = data[0], data[1:]
            if channel == STDIN and process.stdin is not None and payload:
                process.stdin.write(payload)
                await process.stdin.drain()
            elif channel == CLOSE and v5 and payload[:1] == bytes([STDIN]) and process.stdin is not None:
                process.stdin.close()
        # The client went away: the command has nobody to answer.
        if process.returncode is None:
            process.kill()

    feeder = asyncio.create_task(feed())
    try:
        await asyncio.gather(pump(process.stdout, STDOUT), pump(process.stderr, STDERR))
        code = await process.wait()
        await ws.send_bytes(bytes([ERROR]) + json.dumps(exit_status(argv, code)).encode())
    except (ConnectionResetError, RuntimeError):
        if process.returncode is None:
            process.kill()
    finally:
        feeder.cancel()
        await asyncio.gather(feeder, return_exceptions=True)
        await ws.close()
    return ws
