"""Run ``run.py``'s Hydra entry point several times in one process (imports paid once).

Usage: ``python run_many.py cases.json`` where the file holds ``[{"args": [...], "env": {...}}, ...]``.
Prints one JSON line per case: ``{"rc": exit status, "out": stdout, "err": stderr}``. Each case goes
through exactly what ``python run.py <args>`` does (Hydra's ``main`` parses ``sys.argv``); an
exception escaping ``main`` is printed as the interpreter would (a traceback, status 1).
"""

import contextlib
import io
import json
import os
import runpy
import sys
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def main() -> None:
    cases = json.loads(Path(sys.argv[1]).read_text())
    entry = runpy.run_path(str(REPO / "run.py"), run_name="xformer_run")["main"]
    entry.__wrapped__.__module__ = "__main__"  # Hydra then finds conf/ next to run.py, as for a script
    real_stdout = sys.stdout
    base_env = dict(os.environ)
    for case in cases:
        from hydra.core.global_hydra import GlobalHydra

        GlobalHydra.instance().clear()
        os.environ.clear()
        os.environ.update(base_env)
        os.environ.update(case.get("env", {}))
        out, err, rc = io.StringIO(), io.StringIO(), 0
        sys.argv = [str(REPO / "run.py"), *case["args"]]
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                entry()
            except SystemExit as e:
                rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            except BaseException:  # what the interpreter prints for an uncaught exception
                traceback.print_exc()
                rc = 1
        print(json.dumps({"rc": rc, "out": out.getvalue(), "err": err.getvalue()}), file=real_stdout, flush=True)


if __name__ == "__main__":
    main()
