"""SIGINT and SIGTERM stop a command alike: blocks unwind, one line, exit status 130.

Kept free of heavy imports so that the console entry installs the handlers before anything else is
imported: a signal during the seconds of imports is then an interrupt like any other, not a traceback
(SIGINT) or a silent death (SIGTERM). `requested()` tells long start-up loops (starting worker
processes) to stop at once, also where the KeyboardInterrupt was swallowed by a library. `held()`
keeps one back while a start must not be cut in two. The CLI hands SIGHUP (its terminal closed) to
whatever takes SIGTERM (`mugraph.cli.hangup`), so a closed terminal stops a run as these do.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType, TracebackType

EXIT_INTERRUPTED = 130
# A command whose stdout was closed (`mugraph optimize X --json | head -2`): 128 + SIGPIPE, what a shell
# reports for a process SIGPIPE killed, and never 1, which `check` and `explain` give a mismatch.
EXIT_STDOUT_CLOSED = 141
# How to go on with a run that stopped before its end. Not with the fresh start it began with: that
# would delete what it did, so a fresh run's advice leaves it out.
RESUME = "run the same command to resume"
RESUME_FRESH = "run the same command without --fresh to resume"
RESUME_CALL = "call it again to resume"  # the library's (`mugraph.optimize`, `run_optimize`)
RESUME_FRESH_CALL = "call it again without fresh=True to resume"
INTERRUPTED = f"interrupted; {RESUME}"
INTERRUPTED_FRESH = f"interrupted; {RESUME_FRESH}"
FINISHED = "interrupted after the command finished; its output is complete"

# Loggers of the event loop that Dask's client runs in its own thread. An interrupt lands in the main
# thread at any instant, also inside distributed's `sync()` before its coroutine has started; the
# cancel callback it leaves then fails with a NameError that tornado logs as a traceback, while the
# cluster shuts down. The run is ending on the user's request, so these loggers go quiet first.
_LOOP_LOGGERS = ("tornado.application", "tornado.general", "asyncio", "distributed")

_LAST_SIGNAL: list[int | None] = [None]  # the signal the handler last turned into KeyboardInterrupt
_OUTPUT_DONE = [False]  # the command's output is all written (`output_complete`)
_PREVIOUS_UNRAISABLE_HOOK = sys.unraisablehook
_PREVIOUS_EXCEPTHOOK = sys.excepthook


class StdoutClosed(KeyboardInterrupt):
    """A run's stdout was closed while it printed its events: the run stops as an interrupt stops it
    (every `with` block closes, the store stays consistent and resumable), and the command says why."""


def resume_advice(fresh: bool, call: bool = False) -> str:
    """How to go on with a run stopped before its end: its command (or, `call`, the library's call)
    again, without the fresh start that would delete what it did."""
    if call:
        return RESUME_FRESH_CALL if fresh else RESUME_CALL
    return RESUME_FRESH if fresh else RESUME


def requested() -> bool:
    """Whether SIGINT or SIGTERM has reached this process's handlers."""
    return _LAST_SIGNAL[0] is not None


def quiet_event_loop_logs() -> None:
    for name in _LOOP_LOGGERS:
        logging.getLogger(name).setLevel(logging.CRITICAL + 1)


def output_complete(done: bool = True) -> None:
    """The command has written all its output (True) and only returns and exits from here, or a new
    command starts (False). Meanwhile an interrupt is one line (`FINISHED`) and changes nothing: the
    command exits 0, not 130 after its whole result."""
    _OUTPUT_DONE[0] = done


def _interrupted(signum: int, frame: FrameType | None) -> None:
    """The handler: SIGTERM is taken once, the loop's loggers go quiet, the main thread unwinds (but
    not once the command's output is complete: then one line, once)."""
    if _OUTPUT_DONE[0]:
        if _LAST_SIGNAL[0] is None:
            _LAST_SIGNAL[0] = signum
            _say_finished()
        return
    if signum == signal.SIGTERM:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once is enough
    quiet_event_loop_logs()
    _LAST_SIGNAL[0] = signum
    raise KeyboardInterrupt


def _redeliver_dropped_interrupt(unraisable: sys.UnraisableHookArgs) -> None:
    """Python runs a signal's handler at the next bytecode, which may be inside a `__del__`, a
    weakref callback or a gc callback (distributed's GC diagnostics register one). There the
    KeyboardInterrupt is dropped as unraisable and the command would run on to its end. The
    signal is sent again, from another thread once the finalizer has returned, with the handler
    back in place.

    Once an interrupt has come, other unraisable errors are not printed: they are the finalizers
    of objects whose `__init__` the KeyboardInterrupt cut short (z3's Context, stopped before it
    set `owner`, fails in `__del__`), and the command's one line must stay its last. Before any
    interrupt they go to the previous hook."""
    signum = _LAST_SIGNAL[0]
    if signum is None:
        _PREVIOUS_UNRAISABLE_HOOK(unraisable)
        return
    if not isinstance(unraisable.exc_value, KeyboardInterrupt):
        return
    signal.signal(signum, _interrupted)
    main = threading.main_thread().ident
    assert main is not None
    again = threading.Timer(0.05, signal.pthread_kill, (main, signum))
    again.daemon = True  # never holds up the interpreter's exit
    again.start()


def _interrupted_before_main(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
    """An interrupt that escapes to the top (one that came while modules were still being imported)
    is the command's one line and status 130, like any later one."""
    if issubclass(kind, KeyboardInterrupt):
        sys.stderr.write(f"mugraph: {INTERRUPTED}\n")
        sys.stderr.flush()
        _close_stream(sys.argv[1:])
        os._exit(EXIT_INTERRUPTED)  # nothing exists yet that needs closing
    _PREVIOUS_EXCEPTHOOK(kind, value, tb)


def _close_stream(args: list[str]) -> None:
    """Where the command line asked for `optimize --json`'s event stream, its closing `error` event
    (every stream ends with one, as `cli.json_stream` closes it once the command line has loaded)."""
    words = args[: args.index("--")] if "--" in args else args
    if not words or words[0] != "optimize" or "--json" not in words[1:]:
        return
    event = {"event": "error", "error": INTERRUPTED, "kind": "interrupted", "exit_status": EXIT_INTERRUPTED}
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.write(json.dumps(event) + "\n")
        sys.stdout.flush()


def _say_finished() -> None:
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(f"mugraph: {FINISHED}\n")
        sys.stderr.flush()


def _finished(signum: int, frame: FrameType | None) -> None:
    """An interrupt once the command's output is all written: one line, and exit 0 at once."""
    _say_finished()
    os._exit(0)


def exit_once_finished() -> None:
    """For a command that has written all its output and only shuts down (the interpreter joining
    threads and running exit handlers, a tenth of a second or more): an interrupt then is one line and
    exit 0 (`_finished`), as one that comes after a run stored its result, not the signal's death with
    no line (130, or 143 for SIGTERM) that breaks `mugraph optimize X && next`. Only where the command
    line is the process (main thread, its handlers in): a host calling it keeps its own handlers."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(sig) is _interrupted:
            signal.signal(sig, _finished)
    # The interpreter's last steps (exit handlers, then modules torn down with the default handlers
    # back) run no Python handler: from the first exit handler on (this one, registered last), the two
    # signals are ignored, and the process exits 0 on its own a moment later.
    atexit.register(_ignore_interrupts)


def _ignore_interrupts() -> None:
    for sig in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(sig) is _finished:
            signal.signal(sig, signal.SIG_IGN)


def install_interrupt_handlers() -> None:
    """SIGTERM and SIGINT (unless a shell ignores it) stop the command through `_interrupted`, also
    when the signal lands inside a finalizer or during imports. Main thread only."""
    if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, _interrupted):
        signal.signal(signal.SIGTERM, _interrupted)
    if signal.getsignal(signal.SIGINT) in (signal.default_int_handler, _interrupted):  # not where a shell ignores it
        signal.signal(signal.SIGINT, _interrupted)
    sys.unraisablehook = _redeliver_dropped_interrupt
    sys.excepthook = _interrupted_before_main


_Handler = Callable[[int, FrameType | None], object]


@contextlib.contextmanager
def held() -> Iterator[None]:
    """Within, SIGINT and SIGTERM are noted rather than raised, and handed to the handler they had on
    the way out. A KeyboardInterrupt inside a start (a cluster whose scheduler process is half made)
    would leave it half made, its process and event loop running on to the interpreter's exit; held
    back, it comes once the start is whole, where the caller's `with` blocks close it. A second one
    is not held: whoever presses Ctrl-C again will not wait for a start that hangs. Main thread only
    (elsewhere no signal raises); a signal a shell ignores stays ignored."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    noted: list[int] = []
    previous: dict[int, _Handler] = {}

    def note(signum: int, frame: FrameType | None) -> None:
        noted.append(signum)
        if len(noted) > 1:
            previous[signum](signum, frame)

    for sig in (signal.SIGINT, signal.SIGTERM):
        handler = signal.getsignal(sig)
        if handler is _interrupted or handler is signal.default_int_handler:
            previous[sig] = handler
            signal.signal(sig, note)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if noted and not isinstance(sys.exc_info()[1], KeyboardInterrupt):  # not raised on the way already
            previous[noted[0]](noted[0], None)
