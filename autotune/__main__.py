import sys

from autotune.cli import main

code = main()
# Under `python -m`, CPython ends the process by SIGINT (exit -2) when a KeyboardInterrupt ever ended a
# string exec (a dataclass being made when Ctrl-C landed), even one main caught; a string exec clears
# that mark, so the exit status is main's.
exec("")
sys.exit(code)
