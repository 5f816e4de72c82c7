"""verify (being split into modules; see the next commit)."""
from .commitlog import *  # noqa: F401,F403
from .commitlog import _KeyHashes  # noqa: F401
