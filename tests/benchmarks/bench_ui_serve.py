"""Serves recorded Kubernetes LIST bodies over HTTP, for ``bench_ui.py``: run by it, not by hand.

``python bench_ui_serve.py DIR`` reads ``DIR/<namespace>/{jobs,mpijobs,pods,events,configmaps}.json``
(list bodies as the simulator answered them, multiplied by ``bench_ui.py``), prints ``@bench {"port": N}``
and answers the GETs the GPU Jobs views make: the lists, in chunks when asked (``limit`` and ``continue``,
as the Kubernetes API server pages a list), as metadata only when asked (``Accept:
application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1``, each item its ``metadata`` as the
API server sends it, managedFields included), one object by name, and a pod's log. Label selectors
are applied as the API server applies them (the simulator's parser and matcher,
``simulator/airflow_jobs_sim/selectors.py``), so ``airflow-jobs status`` reading by creation windows reads
what it would read from a cluster. The lists are decoded before the port is announced, so the first
request measured does not wait for that. It runs in its own process, so its work is
not counted as the measured one's, and the client decodes real bodies.

Each item is encoded once, whole and as metadata, before the port is announced, and a list body is
those bytes joined; a selector is answered from an index of the items by label key and value: each
requirement is decided once per distinct value (by the simulator's ``Requirement.matches``, the same
rule), not once per item, and once per list and selector, not again for each chunk of a paged LIST (a
``created`` range tests 51,000 distinct values). Otherwise the time a client waits here is this Python
server testing and encoding 51,000 objects per request, where a real API server answers from its watch cache in Go
(kubernetes ``staging/src/k8s.io/apiserver/pkg/storage/cacher``); the answers are the same.
"""

from __future__ import annotations

import bisect
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

RESOURCES = {
    ("api/v1", "pods"): "pods",
    ("api/v1", "events"): "events",
    ("api/v1", "configmaps"): "configmaps",
    ("apis/batch/v1", "jobs"): "jobs",
    ("apis/kubeflow.org/v2beta1", "mpijobs"): "mpijobs",
}


def load(root: Path) -> tuple[dict[str, bytes], dict[str, bytes]]:
    lists: dict[str, bytes] = {}
    objects: dict[str, bytes] = {}
    for space in root.iterdir():
        for (prefix, resource), file in RESOURCES.items():
            raw = (space / f"{file}.json").read_bytes()
            path = f"/{prefix}/namespaces/{space.name}/{resource}"
            lists[path] = raw
            for item in json.loads(raw)["items"]:
                objects[f"{path}/{item['metadata']['name']}"] = json.dumps(item).encode()
    return lists, objects


def main() -> None:
    lists, objects = load(Path(sys.argv[1]))
    decoded = {path: json.loads(raw) for path, raw in lists.items()}
    # Per list: its items, each one's whole and metadata-only encoding.
    encoded = {
        path: [
            (
                item,
                json.dumps(item).encode(),
                json.dumps(
                    {
                        "kind": "PartialObjectMetadata",
                        "apiVersion": "meta.k8s.io/v1",
                        "metadata": item["metadata"],
                    }
                ).encode(),
            )
            for item in whole["items"]
        ]
        for path, whole in decoded.items()
    }

    # Per list: label key -> value -> positions of the items carrying it.
    index: dict[str, dict[str, dict[str, list[int]]]] = {}
    for path, items in encoded.items():
        keyed: dict[str, dict[str, list[int]]] = {}
        for position, (item, _, _) in enumerate(items):
            for key, value in (item["metadata"].get("labels") or {}).items():
                keyed.setdefault(key, {}).setdefault(value, []).append(position)
        index[path] = keyed

    answered: dict[tuple[str, str], list[int]] = {}

    def selected(path: str, selector: str) -> list[int]:
        """Positions of the items ``selector`` selects, in list order: decided once per list and
        selector (the lists never change), not again for each chunk of a paged LIST."""
        if (path, selector) not in answered:
            answered[path, selector] = _selected(path, selector)
        return answered[path, selector]

    ranges: dict[tuple[str, str], tuple[list[int], list[list[int]]]] = {}

    def numeric(path: str, key: str) -> tuple[list[int], list[list[int]]]:
        """The integer values of a label key in order, with the positions carrying each."""
        if (path, key) not in ranges:
            pairs = sorted((int(v), at) for v, at in index[path].get(key, {}).items() if v.isdigit())
            ranges[path, key] = ([n for n, _ in pairs], [at for _, at in pairs])
        return ranges[path, key]

    def _selected(path: str, selector: str) -> list[int]:
        from airflow_jobs_sim.selectors import parse_label_selector

        chosen = set(range(len(encoded[path])))
        for requirement in parse_label_selector(selector):
            values = index[path].get(requirement.key, {})
            if requirement.op in ("=", "in"):
                # The values named, looked up: what deciding every value present gives, without a
                # pass over 51,000 job names per pod LIST selected by job name.
                chosen &= {p for value in requirement.values for p in values.get(value, ())}
                continue
            if requirement.op in ("gt", "lt") and requirement.values[0].isdigit():
                # A range of a label's integer values (``created``: 51,000 of them), found by bisection:
                # what Requirement.matches decides for each, a value that is no integer matching none.
                numbers, ats = numeric(path, requirement.key)
                want = int(requirement.values[0])
                if requirement.op == "gt":
                    picked = ats[bisect.bisect_right(numbers, want) :]
                else:
                    picked = ats[: bisect.bisect_left(numbers, want)]
                chosen &= {p for at in picked for p in at}
                continue
            # Decide the requirement once per value present; an item without the key decides alone.
            matching = {
                p for value, at in values.items() if requirement.matches({requirement.key: value}) for p in at
            }
            if requirement.matches({}):
                matching |= chosen - {p for at in values.values() for p in at}
            chosen &= matching
        return sorted(chosen)

    def chunk(path: str, limit: int, offset: int, selector: str, metadata_only: bool) -> bytes:
        """Items ``offset`` to ``offset + limit`` of the list, with the token of the next chunk."""
        whole = decoded[path]
        every = encoded[path]
        if selector:
            every = [every[p] for p in selected(path, selector)]
        items = every[offset : offset + limit]
        meta = {"resourceVersion": whole["metadata"]["resourceVersion"]}
        if offset + limit < len(every):
            meta["continue"] = str(offset + limit)
            if not selector:  # as the API server: no count of what remains under a selector
                meta["remainingItemCount"] = len(every) - offset - limit
        if metadata_only:
            head = {"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1", "metadata": meta}
            fragments = [e[2] for e in items]
        else:
            head = {**{k: v for k, v in whole.items() if k != "items"}, "metadata": meta}
            fragments = [e[1] for e in items]
        return json.dumps(head).encode()[:-1] + b', "items": [' + b", ".join(fragments) + b"]}"

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def _send(self, code: int, body: bytes, kind: str = "application/json") -> None:
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            parts = urlsplit(self.path)
            path = parts.path.rstrip("/")
            query = parse_qs(parts.query)
            if path.endswith("/log"):
                return self._send(200, b"step 1\nstep 2\n", "text/plain")
            metadata_only = "as=PartialObjectMetadataList" in (self.headers.get("Accept") or "")
            selector = (query.get("labelSelector") or [""])[0]
            if path in lists and (query.get("limit") or metadata_only or selector):
                offset = int((query.get("continue") or ["0"])[0])
                limit = int((query.get("limit") or ["1000000000"])[0])
                return self._send(200, chunk(path, limit, offset, selector, metadata_only))
            body = lists.get(path) or objects.get(path)
            if body is None:
                status = {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "status": "Failure",
                    "reason": "NotFound",
                    "code": 404,
                }
                return self._send(404, json.dumps(status).encode())
            return self._send(200, body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print("@bench " + json.dumps({"port": server.server_address[1]}), flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
