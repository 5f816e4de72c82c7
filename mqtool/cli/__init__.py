"""The ``mqtool`` command line: argument parsing and rendering only; the work is in the library.

Modules, in the order to read them:

* :mod:`.main` - builds the Typer app, the one place that does, from the command modules below
  (none of them imports it), and is the console entry point.
* :mod:`.common` - the error boundary, output helpers, progress settings, :class:`Commands`.
* :mod:`.options` - the arguments and options more than one command takes.
* :mod:`.inspect_cmds` and :mod:`.inspect_view` - ``info`` and ``dump``, and their rendering.
* :mod:`.verify_cmd` - ``verify``.
* :mod:`.query_cmds` - ``query``, ``salvage``, ``export``, ``diff``.
* :mod:`.repair_cmds` - ``recover``, ``truncate``, ``rebuild-queues``, ``rebuild-index``, ``undo``.
* :mod:`.fixture_cmd` - the ``fixture`` group: ``make``, ``damage``.
* :mod:`.spark_cmds` - the ``spark`` group: ``audit``, ``export``.
"""
