"""``python -m xformer.bench``: same as ``xformer bench``."""

import sys

from xformer.bench import main

sys.exit(main())
