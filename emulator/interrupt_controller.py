"""Interrupt controller: delivers device interrupts to the host's handler.

Vectors are small integers defined by the firmware ABI. Delivery is immediate
in simulated time (the handler runs inside the DES step that raised it); the
host-side cost of servicing an interrupt is charged by the driver.
"""
from __future__ import annotations


class InterruptController:
    def __init__(self, env, device_index: int):
        self.env = env
        self.device_index = device_index
        self._handler = None
        self.raised = 0

    def connect(self, handler) -> None:
        """``handler(vector, payload)`` is called for each interrupt."""
        self._handler = handler

    def raise_irq(self, vector: int, payload) -> None:
        self.raised += 1
        if self._handler is not None:
            self._handler(vector, payload)
