"""The GPU Jobs app's routes, one ``APIRouter`` per audience: ``api`` the typed JSON API, ``pages`` the
HTML pages and their forms. ``plugin/app.py`` includes both; what they read is ``plugin/reads.py``."""
