"""The local cluster's scheduler, nannies and workers run their idle periodic callbacks at the longer
intervals the driver sets (each costs CPU whether or not there is work): the nannies in the driver's
process, the scheduler in its own, which gets the driver's settings through its pipe."""

from __future__ import annotations

import os

from mugraph.pipeline.cluster import IDLE_SETTINGS, dask_client, start_workers


def test_scheduler_nannies_and_workers_use_the_idle_intervals() -> None:
    with dask_client(workers=1, dashboard_address=None) as client:
        start_workers(client)
        scheduler_pid = client.run_on_scheduler(os.getpid)
        scheduler_tick = client.run_on_scheduler(lambda dask_scheduler: dask_scheduler._tick_interval)
        monitor_ms = client.run_on_scheduler(
            lambda dask_scheduler: dask_scheduler.periodic_callbacks["monitor"].callback_time
        )
        worker_ticks = client.run(lambda dask_worker: dask_worker._tick_interval)
        nanny_ticks = client.run(lambda dask_worker: dask_worker._tick_interval, nanny=True)
        worker_monitor = client.run(lambda dask_worker: dask_worker.memory_manager.memory_monitor_interval)
        nanny_monitor = client.run(lambda dask_worker: dask_worker.memory_manager.memory_monitor_interval, nanny=True)
    assert scheduler_pid != os.getpid()  # the settings crossed to the scheduler's process
    assert IDLE_SETTINGS["distributed.admin.tick.interval"] == "1s"
    assert scheduler_tick == 1.0  # Dask's default is 0.02
    assert monitor_ms == 2000  # the system monitor; Dask's default is 500 ms
    assert list(worker_ticks.values()) == [1.0]
    assert list(nanny_ticks.values()) == [1.0]
    assert list(worker_monitor.values()) == [1.0]  # Dask's default is 0.1
    assert list(nanny_monitor.values()) == [1.0]
