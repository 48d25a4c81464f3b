"""Pure parts of deploy: SFTP write sizing and the progress lines (no lab needed)."""

from __future__ import annotations

import io

from rich.console import Console

from farm.transports.sftp_upload import SAFE_WRITE, write_size
from farm.views.deploy_progress import deploy_progress, rate_line


def test_writes_fill_whole_channel_packets_within_the_server_limit() -> None:
    header = 4 + 1 + 4 + 4 + 4 + 8 + 4  # OpenSSH handles are 4 bytes
    size = write_size(261120, 32768, 4)  # OpenSSH's limits and session max packet
    assert size <= 261120 and (size + header) % (32768 - 64) == 0
    assert size + header == 7 * (32768 - 64)  # the most whole packets that fit
    assert write_size(SAFE_WRITE, 32768, 4) <= SAFE_WRITE  # an unknown server: 32 KiB
    assert write_size(1000, 32768, 4) == 1000  # a limit below one packet is kept


def test_progress_lines_show_bytes_rate_and_eta() -> None:
    line = rate_line("lab1", 5 << 20, 20 << 20, "uploading", 2.0)
    assert line == "lab1 uploading 5.0/20.0 MiB 2.6 MB/s ETA 6 s"
    out = io.StringIO()
    with deploy_progress(["lab1", "lab2"], Console(file=out, width=100), every_s=60) as cb:
        cb("lab1", 0, 100, "uploading")
        cb("lab1", 50, 100, "uploading")  # same status within every_s: not printed
        cb("lab1", 100, 100, "done")
    lines = out.getvalue().splitlines()
    assert [ln.split()[:2] for ln in lines] == [["lab1", "uploading"], ["lab1", "done"]]
