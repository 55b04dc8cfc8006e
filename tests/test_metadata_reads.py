"""An object's metadata is read through one view: ``cluster.objects.Meta`` (any object) or
``jobs.jobview.JobView`` (a job, which extends it), never by a walk of ``(x.get("metadata") or {})``.

A walk of its own in every reader is where the answers drifted apart: what an absent name is (``None``,
``""``, ``"None"``), whether a ``null`` map is empty, whether a datetime creation time sorts. The view
gives each one answer. Building an object or a patch (``body["metadata"].setdefault(...)``,
``patch["metadata"]["annotations"].update(...)``) writes metadata and is no read. Read from the source.
"""

from __future__ import annotations

import ast
from datetime import datetime, timezone

from package_source import findings

from airflow_jobs_plugin.cluster.objects import Meta

# Modules that read metadata themselves, each with why.
OWN_READERS = {
    "cluster/objects.py": "the view",
    "cluster/records.py": "a pod's typed record, read in one pass (the trigger's hot path)",
    "cluster/watch_transform.py": "copies the metadata it keeps into the watch cache, field by field",
    "jobs/spec_checks.py": "checks an author's pod_template, whose metadata may be of any type: a wrong "
    "type is reported, where the view would read it as empty",
}

# Calls on a metadata map, or a map inside it, that change it: the object is being built or patched.
MUTATORS = frozenset({"setdefault", "update", "pop", "clear", "__setitem__"})


def _metadata_reads(source: str) -> list[int]:
    """Lines that read metadata by hand: ``x.get("metadata")``, or ``x["metadata"]`` not on its way to
    a change (a mutating call or an assignment through it)."""
    tree = ast.parse(source)
    parents: dict[ast.AST, ast.AST] = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[child] = node

    def is_metadata(node: ast.AST) -> bool:
        return isinstance(node, ast.Constant) and node.value == "metadata"

    def written_through(node: ast.AST) -> bool:
        current = node
        while True:
            parent = parents.get(current)
            if isinstance(parent, ast.Subscript) and parent.value is current:
                if isinstance(parent.ctx, ast.Store | ast.Del):
                    return True
                current = parent
            elif isinstance(parent, ast.Attribute) and parent.value is current:
                return parent.attr in MUTATORS
            else:
                return False

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            if node.args and is_metadata(node.args[0]):
                found.append(node.lineno)
        elif isinstance(node, ast.Subscript) and is_metadata(node.slice) and isinstance(node.ctx, ast.Load):
            if not written_through(node):
                found.append(node.lineno)
    return sorted(set(found))


def test_metadata_is_read_through_the_view():
    assert findings(_metadata_reads, OWN_READERS) == set(), (
        "read them through cluster.objects.Meta (or jobs.jobview.JobView for a job)"
    )


def test_the_check_sees_a_walk_and_a_subscript_read_but_not_a_write():
    source = (
        'a = (job.get("metadata") or {}).get("name")\n'
        'b = job["metadata"]["uid"]\n'
        'body["metadata"].setdefault("annotations", {})["k"] = "v"\n'
        'patch["metadata"]["annotations"].update(x)\n'
        'out["metadata"] = {}\n'
        'meta = job["metadata"]\n'
    )
    assert _metadata_reads(source) == [1, 2, 6]


# --- what the view answers ---------------------------------------------------------------------------


def test_absent_and_null_fields_read_as_empty():
    for obj in ({}, {"metadata": None}, {"metadata": {"labels": None, "annotations": None}}, None):
        meta = Meta(obj)
        assert (meta.name, meta.namespace, meta.uid, meta.resource_version) == ("", "", "", None)
        assert (dict(meta.labels), dict(meta.annotations), meta.owner_references) == ({}, {}, [])
        assert (meta.creation_timestamp, meta.created_at, meta.deleting, meta.deletion_time) == (
            "",
            None,
            False,
            None,
        )


def test_a_graceful_deletion_is_due_at_its_deletion_timestamp():
    meta = Meta({"metadata": {"deletionTimestamp": "2026-01-01T10:00:30Z"}})
    assert meta.deleting and meta.deletion_time == datetime(2026, 1, 1, 10, 0, 30, tzinfo=timezone.utc)


def test_a_creation_time_given_as_a_datetime_sorts_as_the_text_the_server_writes():
    naive = Meta({"metadata": {"creationTimestamp": datetime(2026, 1, 1, 10)}})
    given = Meta({"metadata": {"creationTimestamp": "2026-01-01T10:00:00Z"}})
    assert naive.creation_timestamp == "2026-01-01T10:00:00.000000Z"
    assert naive.created_at == given.created_at == datetime(2026, 1, 1, 10, tzinfo=timezone.utc)


def test_a_list_s_continue_token_is_none_on_its_last_page():
    assert Meta({"metadata": {"continue": "abc"}}).continue_token == "abc"
    assert Meta({"metadata": {"continue": ""}}).continue_token is None
