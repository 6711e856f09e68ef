from gitrun.cli.entry import run

run()
