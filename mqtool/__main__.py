from mqtool.cli.main import run

run()
