"""``python -m hmoe_estim`` runs the ``hmoe-estim`` command (:func:`hmoe_estim.study.main`)."""

import sys

from .study._cli import main

sys.exit(main())
