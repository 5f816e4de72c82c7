"""info and dump (being split into modules; see the next commit)."""
from .info import *  # noqa: F401,F403
