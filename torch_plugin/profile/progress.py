"""The progress bar of ``python -m torch_plugin.profile`` (tqdm, on stderr).

Steps through the command line's phases (or a sweep's runs) and, while a script runs, shows the
op count the profiler has recorded so far. Leaves out everything else: it changes no result.
"""
from __future__ import annotations

import sys
import threading


class Progress:
    """A tqdm bar over the CLI's phases (stderr), showing the op count while the script runs."""
    PHASES = ("run script", "report", "trace", "roofline")

    def __init__(self, enabled: bool, prof=None, total: int | None = None, desc: str = ""):
        self.bar = None
        self._stop = threading.Event()
        if not enabled:
            return
        from tqdm import tqdm
        self.bar = tqdm(total=total or len(self.PHASES), desc=desc or "profiling", unit="step",
                        file=sys.stderr, leave=True, dynamic_ncols=True)
        self.prof = prof

    def phase(self, name: str) -> None:
        if self.bar is not None:
            self.bar.set_description_str(name)

    def watch_ops(self) -> None:
        """Refreshes the op count twice a second from a helper thread while the script runs."""
        if self.bar is None or self.prof is None:
            return

        def watch():
            while not self._stop.wait(0.5):
                self.bar.set_postfix_str(f"{len(self.prof._records)} ops", refresh=True)
        threading.Thread(target=watch, name="emu-profile-progress", daemon=True).start()

    def step(self) -> None:
        self._stop.set()
        if self.bar is not None:
            self.bar.update(1)

    def close(self) -> None:
        self._stop.set()
        if self.bar is not None:
            self.bar.close()
