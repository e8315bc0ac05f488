"""Allow ``python -m nmt_cli``."""

from nmt_cli.cli import main

try:
    main()
finally:
    # CPython's ``-m`` runner dies by SIGINT, whatever status the program chose, when a
    # KeyboardInterrupt ever ended code run by string ``exec``/``eval`` (a namedtuple's or
    # dataclass's generated methods being built), even though the interrupt was caught; each
    # string eval clears that flag first, so one more keeps Ctrl-C's documented exit 130.
    eval("None")
