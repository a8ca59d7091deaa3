"""A worker lost while it held finished results (killed, its machine gone): distributed's client logs
`Couldn't gather N keys, rescheduling [...]` at WARNING on the driver's terminal and has the scheduler
run those tasks again. Nothing is wrong with the run: the driver watches results that went with their
worker (`driver._result`) and says itself when no worker is left (`watch`). The record is demoted to
one DEBUG line on this module's logger."""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)

CLIENT_LOGGER = "distributed.client"
GATHER_RETRY = "Couldn't gather"  # the start of the client's message (`Client._gather`)


class GatherRetries(logging.Filter):
    """Drops the client's "Couldn't gather ... rescheduling" records; lets everything else pass."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith(GATHER_RETRY):
            return True
        logger.debug("a worker left with results; distributed runs them again: %s", record.getMessage()[:300])
        return False


_FILTER = GatherRetries()


def quiet_gather_retries() -> None:
    """Install the filter in this process (idempotent: one filter object, added once)."""
    logging.getLogger(CLIENT_LOGGER).addFilter(_FILTER)
