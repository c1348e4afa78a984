"""`python -m webhook` is the same program as `gpu-share-webhook`."""

import sys

from webhook import cli

sys.exit(cli.main())
