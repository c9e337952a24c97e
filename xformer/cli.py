"""The ``xformer`` console command: ``xformer report|claims|bench|translate|dashboard ...``.

Each sub-command lives beside the code it drives; this file only dispatches to it.
"""

from __future__ import annotations

import importlib
import sys

COMMANDS = {
    "report": ("xformer.report.cli", "Aggregate sweep folders into report.md, plots and claim verdicts"),
    "claims": ("xformer.report.claims_run", "Run the claim sweeps that are missing, publish reports, README table"),
    "bench": ("xformer.bench", "Benchmark xformer against PyTorch and x-transformers (bench.json)"),
    "translate": ("xformer.train.translate", "Translate stdin lines with a checkpoint"),
    "dashboard": ("xformer.dashboard", "Build the W&B workspace of a sweep (wandb-workspaces)"),
}


def main(argv: list[str] | None = None) -> int:
    """Run ``xformer <command> [args]``; each command's module exposes ``main(argv) -> int``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        if argv and argv[0] not in ("-h", "--help"):
            print(f"error: unknown command {argv[0]!r}; choose from {', '.join(COMMANDS)}", file=sys.stderr)
        print("usage: xformer {" + ",".join(COMMANDS) + "} [args]\n")
        for name, (_, text) in COMMANDS.items():
            print(f"  {name:<10} {text}")
        return 0 if not argv or argv[0] in ("-h", "--help") else 2
    module = importlib.import_module(COMMANDS[argv[0]][0])
    return int(module.main(argv[1:]) or 0)


if __name__ == "__main__":
    sys.exit(main())
