# SPDX-License-Identifier: Apache-2.0
"""The worker's mover: one thread that runs, in order, the copies the
step need not wait for (asynchronous loads, and stores).  The library
releases the GIL while it waits and copies."""

import logging
import queue
import threading
from typing import Callable

log = logging.getLogger("kvtier.vllm")


class Mover:
    def __init__(self):
        self._thread: threading.Thread | None = None
        self._jobs: queue.Queue = queue.Queue()

    def submit(self, job: Callable[[], None]) -> None:
        """Runs job on the mover's thread, started at the first job."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._move, name="kvtier-mover", daemon=True)
            self._thread.start()
        self._jobs.put(job)

    @property
    def pending(self) -> int:
        """Jobs submitted and not done yet."""
        return self._jobs.unfinished_tasks

    def _move(self) -> None:
        while True:
            job = self._jobs.get()
            try:
                if job is None:
                    return
                job()
            except Exception:  # a job reports its own result; nothing may stop the mover
                log.exception("kvtier: a copy failed")
            finally:
                self._jobs.task_done()

    def drain(self) -> None:
        """Waits until the jobs submitted are done."""
        if self._thread is not None:
            self._jobs.join()

    def close(self) -> None:
        """Stops the thread once the jobs submitted are done."""
        if self._thread is not None:
            self._jobs.put(None)
            self._thread.join()
            self._thread = None
