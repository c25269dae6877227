"""A profiled block read back after it ended: what the report and the Chrome trace share.

``BlockAnalysis`` holds the block's time window, its commands (their firmware trace records
merged, commands.py), the lane spans of those records (runtime/report.py's ``lane_spans``) and
which op submitted each command (attribution.py); ``report()`` and ``chrome_trace()`` hand it to
summary.py and chrome_trace.py. It computes nothing else and keeps nothing between calls.
"""
from __future__ import annotations

from runtime import report as device_report
from torch_plugin.profile import attribution
from torch_plugin.profile.chrome_trace import chrome_trace
from torch_plugin.profile.commands import EntryLanes, merge_commands
from torch_plugin.profile.report import ProfileReport
from torch_plugin.profile.summary import build_report


class BlockAnalysis:
    def __init__(self, prof):
        self.prof = prof
        self.config = prof._config
        self.t0, self.t1 = prof._start["now_ns"], prof._end["now_ns"]
        self.names = {seq: name for seq, name, *_ in prof._commands}
        self.spans = device_report.lane_spans(prof._entries)  # {lane: [(start, end, entry)]}
        self._entry_lanes = EntryLanes(self.spans)
        self.commands = merge_commands(prof._entries, self._entry_lanes, self.config)
        self.owner = attribution.owners(prof._records)
        self.own_seqs = attribution.own_seqs(self.owner)

    def lane_spans_of(self, cmd) -> list:
        """[(lane, [(start, end, entry)])] of the command's trace records."""
        return self._entry_lanes.of_command(cmd)

    def report(self) -> ProfileReport:
        return build_report(self)

    def chrome_trace(self) -> dict:
        return chrome_trace(self)
