"""Whether a state-changing request comes from this Airflow's own pages (a cross-site request forgery guard).

Airflow's UI authenticates the browser with a session cookie (``_token``). A browser attaches that
cookie to a form another site posts to us whenever the cookie's SameSite rule lets it (always for a
same-site origin such as another port or subdomain of the same host), so a cookie alone does not prove
that the user meant to cancel, stop or resume a job. Browsers send ``Origin`` on every POST (and
``Referer`` unless told not to), and a page cannot forge either, so a POST authenticated by the cookie
is accepted only when its ``Origin`` (or, without one, its ``Referer``) is this Airflow's own origin.
A request carrying ``Authorization: Bearer ...`` is not checked: a browser never adds that header by
itself, so whoever sent it holds the token.

Pure: the shell (:mod:`airflow_jobs_plugin.plugin.app`) gathers the headers and the origins this
Airflow is reached at.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlsplit

_DEFAULT_PORTS = {"http": 80, "https": 443}


def origin_of(url: str | None) -> str | None:
    """``scheme://host[:port]`` of a URL, lower-cased, default port dropped; ``None`` if it has none."""
    if not url:
        return None
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    if scheme not in _DEFAULT_PORTS or not host:
        return None
    if ":" in host:  # an IPv6 literal keeps its brackets
        host = f"[{host}]"
    return f"{scheme}://{host}" if port in (None, _DEFAULT_PORTS[scheme]) else f"{scheme}://{host}:{port}"


def refusal(origin: str | None, referer: str | None, own_origins: Iterable[str]) -> str | None:
    """Why a cookie-authenticated POST is refused, or ``None`` when it comes from one of ``own_origins``.

    ``Origin: null`` (an opaque origin: a sandboxed frame without ``allow-same-origin``, a ``data:``
    URL, a redirect across sites) is refused; so is a request with neither header, which no browser
    form or script sends.
    """
    own = {o for o in (origin_of(u) for u in own_origins) if o}
    if origin is not None and origin.strip():
        if origin.strip() == "null":
            return "cross-origin request refused: the page that sent it has no origin (Origin: null)"
        claimed = origin_of(origin)
        source = "Origin"
    elif referer:
        claimed = origin_of(referer)
        source = "Referer"
    else:
        return (
            "cross-origin request refused: no Origin or Referer header; send the request from the "
            "GPU Jobs page, or authenticate with Authorization: Bearer <token>"
        )
    if claimed in own:
        return None
    return f"cross-origin request refused: {source} {claimed or origin or referer} is not this Airflow ({', '.join(sorted(own)) or 'unknown'})"
