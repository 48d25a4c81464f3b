"""TVM RPC: the tracker and servers farm runs (processes) and client sessions (queued on the
tracker). The tracker and servers are TVM's own (`tvm.exec.rpc_tracker`, `tvm.exec.rpc_server`)
run as child processes in their own process groups, bound to loopback: TVM RPC has no
authentication and lets a client write files, so remote devices are reached through SSH
port forwards only.
"""

from __future__ import annotations

from farm.rpc.procs import ServiceProcess
from farm.rpc.server import rpc_server_argv, start_rpc_server
from farm.rpc.session import RemoteRun, tracker_session
from farm.rpc.tracker import start_tracker, stop_tracker, tracker_state, tracker_status

__all__ = ["RemoteRun", "ServiceProcess", "rpc_server_argv", "start_rpc_server",
           "start_tracker", "stop_tracker", "tracker_session", "tracker_state",
           "tracker_status"]
