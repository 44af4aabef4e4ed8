"""The driver's memory, measured: `PeakRss` samples this process's resident memory while a
stage runs (`RayExecutor(measure_memory=True)`, bench/ray_executor.py)."""

from __future__ import annotations

import threading
import time


class PeakRss:
    """The peak resident memory of this process while it runs, sampled every 20 ms."""

    def __init__(self) -> None:
        import psutil

        self.process = psutil.Process()
        self.peak = self.process.memory_info().rss
        self.running = True
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()

    def _sample(self) -> None:
        while self.running:
            self.peak = max(self.peak, self.process.memory_info().rss)
            time.sleep(0.02)

    def stop(self) -> int:
        self.running = False
        self.thread.join()
        return max(self.peak, self.process.memory_info().rss)
