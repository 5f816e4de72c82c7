"""Offline repair (being split into modules; see the next commit)."""
from .planners import *  # noqa: F401,F403
