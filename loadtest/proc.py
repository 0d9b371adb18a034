"""CPU seconds of a process from /proc (Linux).

Where it sits: under every benchmark in loadtest/ that reports a server's CPU
(``run``, ``reqcost``, ``width``): the agent's, Kafka's or Postgres's, read
before and after a measured window.
"""

from __future__ import annotations

import os
from pathlib import Path


def stat_fields(pid: int | str) -> list[str]:
    """The fields of ``/proc/<pid>/stat`` after the command name (which may hold
    spaces and parentheses): index 1 is the parent pid, 11-14 utime, stime,
    cutime, cstime. Raises OSError when the process is gone."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def cpu_seconds(pid: int) -> float:
    """utime + stime of a live process, in seconds."""
    fields = stat_fields(pid)
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
