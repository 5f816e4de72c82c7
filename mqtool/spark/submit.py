"""The file to hand to ``spark-submit``: ``spark-submit [spark options] submit.py audit|export ...``
runs ``mqtool spark audit|export`` inside spark-submit's driver (the master and settings are
spark-submit's; do not pass --master). ``python -m mqtool.spark.submit --where`` prints this
file's path."""
from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if args == ["--where"]:
        print(__file__)
        return
    from mqtool.cli.main import run

    run(["--no-progress", "spark", *args])


if __name__ == "__main__":
    main()
