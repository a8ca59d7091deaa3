"""While a run waits on its scheduler, the log records Dask writes as the connection fails (the
client's reconnections and its batched stream's "Batched Comm Closed", each with a traceback) are not
printed: the run says in one line that the scheduler was lost. Other records still are."""

from __future__ import annotations

import logging
from typing import Any, cast

import pytest
from distributed import Client
from distributed.comm.core import CommClosedError

from mugraph.dashboards.live import _Sender
from mugraph.pipeline.lost_scheduler import scheduler_loss_said

pytestmark = pytest.mark.unit


def _record(name: str, exc: BaseException | None, message: str = "Batched Comm Closed %r") -> logging.LogRecord:
    info = (type(exc), exc, None) if exc is not None else None
    return logging.getLogger(name).makeRecord(name, logging.INFO, __file__, 1, message, ("comm",), info)


@pytest.mark.parametrize("name", ["distributed.client", "distributed.batched"])
def test_connection_records_are_dropped_within_and_kept_after(name: str) -> None:
    logger = logging.getLogger(name)
    lost = _record(name, CommClosedError("in <TCP (closed)>: Stream is closed"))
    other = _record(name, ValueError("a bug"), "something else %r")
    with scheduler_loss_said(cast(Client, object())):
        assert not logger.filter(lost)
        assert logger.filter(other)
    assert logger.filter(lost)  # the filter goes with the run that set it


def test_a_lost_connection_is_not_warned_of_by_the_live_page(caplog: Any) -> None:
    with caplog.at_level(logging.DEBUG, logger="mugraph.dashboards.live"):
        _Sender().failed("CommClosedError('Stream is closed')", connection=True)
        assert [r.levelno for r in caplog.records] == [logging.DEBUG]
        _Sender().failed("TypeError('not serializable')")
        assert [r.levelno for r in caplog.records] == [logging.DEBUG, logging.WARNING]
