"""Ctrl-C, SIGTERM and SIGHUP for the entry points that do not train: predict.py and export.py stop at once, remove
what they had half-written, and exit with 128 + the signal's number, as a shell and a scheduler expect.

Unlike training, there is nothing to save: the work is repeated by running the same command again.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from types import FrameType

from .loaders import STOP_SIGNALS


class Stopped(BaseException):  # a BaseException, as KeyboardInterrupt is: `except Exception` must not swallow it
    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise(signum: int, frame: FrameType | None) -> None:
    raise Stopped(signum)


def run_stoppable(main: Callable[[], object], script: str, lost: str) -> None:
    """`main()` with the stop signals raising Stopped; a stop ends the process in one line, with 128 + the signal."""
    previous = {signum: signal.signal(signum, _raise) for signum in STOP_SIGNALS}
    try:
        main()
    except Stopped as stop:  # what was half-written is already removed, by the finally blocks it went through
        print(f"{script}: stopped by {stop}; {lost}, run the same command again", file=sys.stderr)
        raise SystemExit(128 + stop.signum) from None
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
