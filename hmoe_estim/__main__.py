"""``python -m hmoe_estim`` runs the ``hmoe-estim`` command (:func:`hmoe_estim.cli.main`)."""

import sys

from .cli import main

sys.exit(main())
