from gitrun.entry import run

run()
