"""``python -m autotune.cli`` is the same as the ``autotune`` console script."""

from autotune.cli import main

raise SystemExit(main())
