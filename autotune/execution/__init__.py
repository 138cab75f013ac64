"""Running one trial: the subprocess, its process tree, its launch line, its GPU monitor."""
