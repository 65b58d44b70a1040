"""A parent process for ExecuTorch workers: it imports torch and ExecuTorch's runtime once, then forks one
child per program.

Every program still runs in a process of its own (a forked child), so a segfault or abort in ExecuTorch's
runtime kills that child only and fails one test; what the fork saves is the ~2 s each fresh worker spends
importing torch and the runtime. The parent imports modules only: it runs no operator and starts no
thread, so forking it is safe.

Protocol, one line per request on stdin: ``MODULE FOLDER``, MODULE a worker module with ``main(folder)``
(``tests.executorch_worker``, ``tests.executorch_training_worker``). The server answers ``pid PID`` when the child starts
and ``status CODE`` when it ends, CODE in ``subprocess``'s convention (negative: killed by that signal).
The child runs ``MODULE.main(FOLDER)`` with stdout and stderr going to ``FOLDER/worker.log``.
The server exits when stdin closes.
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback


def _child(module: str, folder: str) -> None:
    log = os.open(os.path.join(folder, "worker.log"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    code = 0
    try:
        importlib.import_module(module).main(folder)
    except BaseException:
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def serve() -> None:
    import executorch.kernels.quantized  # noqa: F401  what every worker imports first
    import torch  # noqa: F401

    from tests import executorch_worker

    executorch_worker._import_runtime()
    print("ready", flush=True)
    while line := sys.stdin.readline():
        if not line.strip():
            continue
        module, folder = line.strip().split(" ", 1)
        pid = os.fork()
        if pid == 0:
            _child(module, folder)
        print(f"pid {pid}", flush=True)
        _, status = os.waitpid(pid, 0)
        print(f"status {os.waitstatus_to_exitcode(status)}", flush=True)


if __name__ == "__main__":
    serve()
