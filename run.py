"""xformer's entry point: ``python run.py [group=option ...] [key=value ...] [-m]``.

Returns the configured objective (``objective.metric``) so Hydra sweepers (Optuna) can optimise it.
Invalid configurations and inputs print one line naming the key/file and the fix, and exit with
status 2 (set ``HYDRA_FULL_ERROR=1`` for the stack trace).
"""

import logging
import os
import sys

import hydra
from omegaconf import DictConfig


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> float | None:
    from hydra.core.hydra_config import HydraConfig

    from xformer.data.errors import DataError
    from xformer.model import ConfigError
    from xformer.train.driver import run

    try:
        return run(cfg)
    except (ConfigError, DataError) as err:
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        logging.getLogger("xformer").error("%s", err)
        if str(HydraConfig.get().mode) == "RunMode.MULTIRUN":
            raise  # Hydra records the failed job and the sweep goes on
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
