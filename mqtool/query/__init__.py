"""query (being split into modules; see the next commit)."""
from .index import *  # noqa: F401,F403
