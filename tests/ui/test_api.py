"""The plugin's routes on a real Airflow API server: Airflow's authentication and authorization apply.

``admin`` has the Admin role, ``viewer`` the Viewer role (read-only) of Airflow's SimpleAuthManager.
"""

from __future__ import annotations

import httpx
import pytest

from tests.ui.json_api import display_values, untyped, validate

PREFIX = "/airflow-jobs"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tokens(api_server):
    return {user: api_server.token(user) for user in ("admin", "viewer")}


def get(api_server, path: str, token: str | None = None, **kw) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.get(
        f"{api_server.url}{path}", headers={**headers, **kw.pop("headers", {})}, timeout=30, **kw
    )


def post(api_server, path: str, token: str | None = None, **kw) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.post(
        f"{api_server.url}{path}", headers={**headers, **kw.pop("headers", {})}, timeout=30, **kw
    )


def task_path(population, role: str) -> str:
    i = population.identities[role]
    return f"{i.dag_id}/{i.task_id}/{i.run_id}"


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/"),
        ("GET", "/api/overview"),
        ("GET", "/api/pools"),
        ("GET", "/api/queues"),
        ("GET", "/api/jobs"),
        ("GET", "/api/jobs/default/{runner}"),
        ("GET", "/jobs/default/{runner}"),
        ("GET", "/jobs/{task}"),
        ("GET", "/api/tasks/{task}"),
        ("POST", "/api/jobs/default/{runner}/cancel"),
        ("POST", "/jobs/default/{runner}/cancel"),
        ("POST", "/api/jobs/default/{runner}/stop"),
        ("POST", "/api/jobs/default/{runner}/resume"),
        ("POST", "/jobs/default/{runner}/stop"),
        ("POST", "/jobs/default/{runner}/resume"),
    ],
)
def test_unauthenticated_requests_get_401(api_server, population, method, path):
    url = PREFIX + path.format(runner=population.names["runner"], task=task_path(population, "runner"))
    response = get(api_server, url) if method == "GET" else post(api_server, url)
    assert response.status_code == 401, response.text
    assert response.json() == {"detail": "Not authenticated"}


def test_a_forged_token_is_refused(api_server):
    assert get(api_server, f"{PREFIX}/api/overview", "not-a-jwt").status_code == 403


@pytest.mark.parametrize("user", ["admin", "viewer"])
def test_authenticated_readers_get_pools_queues_and_jobs(api_server, population, tokens, user):
    response = get(api_server, f"{PREFIX}/api/overview", tokens[user])
    assert response.status_code == 200, response.text
    data = response.json()
    states = {j["name"]: j["state"] for j in data["jobs"]}
    assert states[population.names["runner"]] == "RUNNING"
    assert states[population.names["broken"]] == "FAILED"
    assert states[population.names["waiting"]] == "QUEUED"
    assert {p["group"] for p in data["pools"]} == {"nlp", "vision"}
    (queue,) = data["queues"]
    assert (queue["group"], queue["entries"][0]["position"], queue["entries"][0]["reason"]) == (
        "vision",
        1,
        "GroupQuota",
    )


def test_parts_of_the_overview_have_their_own_endpoints(api_server, population, tokens):
    pools = get(api_server, f"{PREFIX}/api/pools", tokens["viewer"]).json()
    assert {p["group"]: p["quota"] for p in pools} == {"nlp": 12, "vision": 4}
    queues = get(api_server, f"{PREFIX}/api/queues", tokens["viewer"]).json()
    assert [e["name"] for q in queues for e in q["entries"]] == [population.names["waiting"]]
    jobs = get(api_server, f"{PREFIX}/api/jobs", tokens["viewer"]).json()
    assert population.names["mpi"] in {j["name"] for j in jobs}


def test_job_detail_json(api_server, population, tokens):
    response = get(api_server, f"{PREFIX}/api/jobs/default/{population.names['mpi']}", tokens["viewer"])
    assert response.status_code == 200, response.text
    data = response.json()
    assert data["job"]["kind"] == "MPIJob"
    assert [(r["replica"], r["rank"], r["status"]) for r in data["replicas"]] == [
        ("launcher", -1, "Running"),
        ("worker-0", 0, "Running"),
        ("worker-1", 1, "Running"),
    ]
    assert [t["rank"] for t in data["logs"]] == [-1, 0, 1]


def test_task_view_finds_the_job_of_a_task_instance(api_server, population, tokens):
    path = f"{PREFIX}/api/tasks/{task_path(population, 'broken')}"
    response = get(api_server, path, tokens["viewer"], params={"map_index": "-1"})
    assert response.status_code == 200, response.text
    assert response.json()["job"]["name"] == population.names["broken"]
    # Airflow's task view leaves {MAP_INDEX} unfilled for an unmapped task.
    page = get(
        api_server,
        f"{PREFIX}/jobs/{task_path(population, 'broken')}?map_index={{MAP_INDEX}}",
        tokens["viewer"],
    )
    assert page.status_code == 200
    assert population.names["broken"] in page.text


def test_task_without_a_job_yet(api_server, tokens):
    page = get(api_server, f"{PREFIX}/jobs/nightly_training/not_submitted/manual__1", tokens["viewer"])
    assert page.status_code == 404
    assert "has not been submitted yet" in page.text
    assert get(api_server, f"{PREFIX}/api/jobs/default/no-such-job", tokens["viewer"]).status_code == 404


def test_pages_accept_airflows_session_cookie(api_server, population, tokens):
    response = get(api_server, f"{PREFIX}/", cookies={"_token": tokens["viewer"]})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    assert population.names["runner"] in response.text


def test_viewer_may_not_cancel(api_server, population, tokens):
    name = population.names["doomed"]
    response = post(api_server, f"{PREFIX}/api/jobs/default/{name}/cancel", tokens["viewer"])
    assert response.status_code == 403
    assert response.json() == {"detail": "Forbidden"}
    assert post(api_server, f"{PREFIX}/jobs/default/{name}/cancel", tokens["viewer"]).status_code == 403
    detail = get(api_server, f"{PREFIX}/api/jobs/default/{name}", tokens["viewer"]).json()
    assert detail["job"]["state"] == "RUNNING"
    for action in ("stop", "resume"):
        assert (
            post(api_server, f"{PREFIX}/api/jobs/default/{name}/{action}", tokens["viewer"]).status_code
            == 403
        )
    page = get(api_server, f"{PREFIX}/jobs/default/{name}", tokens["viewer"]).text
    assert "Cancel job" not in page and "Stop job" not in page
    admin_page = get(api_server, f"{PREFIX}/jobs/default/{name}", tokens["admin"]).text
    assert "Cancel job" in admin_page and "Stop job" in admin_page
    assert "confirm(" not in admin_page  # Airflow's frame has no allow-modals: confirmation is in the page


def test_admin_cancels_a_job(api_server, population, tokens):
    name = population.names["doomed"]
    response = post(api_server, f"{PREFIX}/api/jobs/default/{name}/cancel", tokens["admin"])
    assert response.status_code == 200, response.text
    assert response.json() == {
        "already_finished": False,
        "deleted": False,
        "ended": True,
        "kind": "Job",
        "message": f"job/{name} cancelled: its pods are stopped and it stays listed as cancelled until it is deleted",
        "name": name,
        "namespace": "default",
    }
    after = get(api_server, f"{PREFIX}/api/jobs/default/{name}", tokens["admin"])
    assert after.status_code == 200
    assert after.json()["job"]["state"] in {"CANCELLED", "TERMINATING"}


def test_plugin_is_registered_with_its_views(api_server, tokens):
    plugins = get(api_server, "/api/v2/plugins", tokens["admin"]).json()["plugins"]
    (plugin,) = [p for p in plugins if p["name"] == "airflow_jobs"]
    assert [a["url_prefix"] for a in plugin["fastapi_apps"]] == [PREFIX]
    views = {v["name"]: v for v in plugin["external_views"]}
    assert views["GPU Jobs"]["destination"] == "nav"
    assert views["GPU Job"]["destination"] == "task_instance"
    assert (
        views["GPU Job"]["href"] == f"{PREFIX}/jobs/{{DAG_ID}}/{{TASK_ID}}/{{RUN_ID}}?map_index={{MAP_INDEX}}"
    )
    assert any("JobLink" in link for link in plugin["operator_extra_links"])


def test_admin_stops_and_resumes_a_job(api_server, population, tokens):
    name = population.names["paused"]
    stopped = post(api_server, f"{PREFIX}/api/jobs/default/{name}/stop", tokens["admin"])
    assert stopped.status_code == 200, stopped.text
    assert stopped.json()["done"] is True
    detail = get(api_server, f"{PREFIX}/api/jobs/default/{name}", tokens["admin"]).json()
    assert detail["job"]["state"] in {"TERMINATING", "STOPPED"}
    assert detail["job"]["reason"] == "Stopped"
    assert detail["actions"] == ["resume", "cancel"]
    again = post(api_server, f"{PREFIX}/api/jobs/default/{name}/stop", tokens["admin"]).json()
    assert again["done"] is False and again["message"].startswith(f"job/{name} is already stopped by admin")
    resumed = post(api_server, f"{PREFIX}/api/jobs/default/{name}/resume", tokens["admin"]).json()
    assert resumed["done"] is True
    # No admitting pass has run since the stop: the job still holds its GPUs and starts again with them.
    assert "it still holds its GPUs" in resumed["message"]
    assert (
        get(api_server, f"{PREFIX}/api/jobs/default/{name}", tokens["admin"]).json()["job"]["state"]
        == "SCHEDULING"
    )
    # Out of the queue again, so the other tests find the queues as the population made them.
    assert post(api_server, f"{PREFIX}/api/jobs/default/{name}/cancel", tokens["admin"]).status_code == 200


def test_a_cross_origin_post_with_airflows_session_cookie_is_refused(api_server, population, tokens):
    name = population.names["runner"]
    cookie = {"_token": tokens["admin"]}
    for path in (f"/api/jobs/default/{name}/cancel", f"/jobs/default/{name}/stop"):
        forged = post(api_server, PREFIX + path, cookies=cookie, headers={"Origin": "https://evil.example"})
        assert forged.status_code == 403, forged.text
        assert "Origin https://evil.example is not this Airflow" in forged.json()["detail"]
    # Airflow honours only Bearer: with Basic it authenticates the cookie, so the check still applies.
    basic = post(
        api_server,
        f"{PREFIX}/api/jobs/default/{name}/cancel",
        cookies=cookie,
        headers={"Origin": "https://evil.example", "Authorization": "Basic YWRtaW46YWRtaW4tcHc="},
    )
    assert basic.status_code == 403, basic.text
    bare = post(api_server, f"{PREFIX}/jobs/default/{name}/cancel", cookies=cookie)
    assert bare.status_code == 403
    assert "no Origin or Referer header" in bare.json()["detail"]
    detail = get(api_server, f"{PREFIX}/api/jobs/default/{name}", tokens["admin"]).json()
    assert detail["job"]["state"] == "RUNNING"  # nothing happened to the job


def test_a_same_origin_form_post_with_the_cookie_acts_and_comes_back_with_its_answer(
    api_server, population, tokens
):
    name = population.names["runner"]
    response = post(
        api_server,
        f"{PREFIX}/jobs/default/{name}/resume",
        cookies={"_token": tokens["admin"]},
        headers={"Origin": api_server.url},
    )
    assert response.status_code == 303, response.text
    location = response.headers["location"]
    assert location.startswith(f"{PREFIX}/jobs/default/{name}?notice=")
    page = get(api_server, location, cookies={"_token": tokens["admin"]})
    assert f"job/{name} is not stopped (admitted and holds its GPUs): nothing to resume" in page.text


HTML = {"Accept": "text/html,application/xhtml+xml"}


def test_a_browser_not_signed_in_is_sent_to_airflows_sign_in_page_and_back(api_server, population):
    path = f"{PREFIX}/jobs/default/{population.names['runner']}"
    response = get(api_server, path, headers=HTML, follow_redirects=False)
    assert response.status_code == 303
    location = response.headers["location"]
    assert "/auth/" in location and "login" in location, location
    assert "next=" in location and population.names["runner"] in httpx.URL(location).params["next"]
    # The JSON API, and clients that do not ask for HTML, keep FastAPI's JSON.
    assert get(api_server, f"{PREFIX}/api/overview", headers=HTML).json() == {"detail": "Not authenticated"}


def test_page_errors_are_pages_not_json(api_server, tokens):
    missing = get(api_server, f"{PREFIX}/no/such/page", tokens["viewer"], headers=HTML)
    assert missing.status_code == 404 and missing.headers["content-type"].startswith("text/html")
    assert "Not found" in missing.text
    refused = get(api_server, f"{PREFIX}/", "not-a-jwt", headers=HTML)
    assert refused.status_code == 403 and refused.headers["content-type"].startswith("text/html")
    assert "Not allowed" in refused.text


def test_a_page_asked_with_a_bad_query_parameter_is_a_page_naming_it(api_server, tokens):
    bad = get(api_server, f"{PREFIX}/?offset=ten", tokens["viewer"], headers=HTML)
    assert bad.status_code == 422 and bad.headers["content-type"].startswith("text/html")
    assert "Bad query parameter" in bad.text
    assert "offset: Input should be a valid integer" in bad.text and "(got &#x27;ten&#x27;)" in bad.text
    # The JSON API keeps FastAPI's 422, whoever asks.
    api = get(api_server, f"{PREFIX}/api/overview?offset=ten", tokens["viewer"], headers=HTML)
    assert api.status_code == 422 and api.json()["detail"][0]["loc"] == ["query", "offset"]


def test_the_node_view_as_json_and_as_a_page(api_server, population, tokens):
    body = get(api_server, f"{PREFIX}/api/nodes", tokens["viewer"]).json()
    assert body["gpus"] == 16 and body["used"] + body["free"] == 16
    assert population.names["runner"] in {h["job"] for n in body["nodes"] for h in n["holders"]}
    page = get(api_server, f"{PREFIX}/nodes", tokens["viewer"])
    assert page.status_code == 200 and 'id="nodes"' in page.text
    assert get(api_server, f"{PREFIX}/api/nodes").status_code == 401


def test_every_json_route_answers_what_its_openapi_schema_describes(api_server, population, tokens):
    spec = get(api_server, f"{PREFIX}/openapi.json").json()
    assert untyped(spec) == []
    names = population.names
    reads = {
        "/api/overview": "/api/overview",
        "/api/pools": "/api/pools",
        "/api/queues": "/api/queues",
        "/api/jobs": "/api/jobs",
        f"/api/jobs/default/{names['mpi']}": "/api/jobs/{namespace}/{name}",
        f"/api/jobs/default/{names['broken']}": "/api/jobs/{namespace}/{name}",
        f"/api/jobs/default/{names['waiting']}": "/api/jobs/{namespace}/{name}",
        f"/api/tasks/{task_path(population, 'runner')}?map_index=-1": "/api/tasks/{dag_id}/{task_id}/{run_id}",
        "/api/nodes": "/api/nodes",
    }
    for url, path in reads.items():
        response = get(api_server, PREFIX + url, tokens["viewer"])
        assert response.status_code == 200, (url, response.text)
        validate(spec, "GET", path, response.json())
        assert display_values(response.json()) == [], url
    # Actions that do not apply: answered, nothing changes.
    for url, path in {
        f"/api/jobs/default/{names['done']}/cancel": "/api/jobs/{namespace}/{name}/cancel",
        f"/api/jobs/default/{names['runner']}/resume": "/api/jobs/{namespace}/{name}/resume",
        f"/api/jobs/default/{names['done']}/stop": "/api/jobs/{namespace}/{name}/stop",
    }.items():
        response = post(api_server, PREFIX + url, tokens["admin"])
        assert response.status_code == 200, (url, response.text)
        validate(spec, "POST", path, response.json())
        assert response.json().get("done") is not True and response.json().get("deleted") is not True
    denied = get(api_server, f"{PREFIX}/api/jobs/default/no-such-job", tokens["viewer"])
    validate(spec, "GET", "/api/jobs/{namespace}/{name}", denied.json(), status="404")


def test_the_job_json_has_times_and_seconds_where_the_page_prints_ages(api_server, population, tokens):
    name = population.names["mpi"]
    detail = get(api_server, f"{PREFIX}/api/jobs/default/{name}", tokens["viewer"]).json()
    launcher = detail["replicas"][0]
    assert (launcher["ready_containers"], launcher["containers"], launcher["restarts"]) == (1, 1, 0)
    assert launcher["pod_created_at"].endswith("Z") and launcher["age_seconds"] >= 0
    assert detail["job"]["created_at"].endswith("Z") and detail["job"]["age_seconds"] >= 0
    assert detail["snapshot"]["replicas"][0]["ready_containers"] == 1
    page = get(api_server, f"{PREFIX}/jobs/default/{name}", tokens["viewer"]).text
    assert "<td>1/1</td>" in page  # the page keeps kubectl's READY column
