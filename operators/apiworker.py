"""A worker process of the API server: `python -m operators.apiworker ARGUMENT` (started by `stead run
--config-api-workers N`, never by hand). Here, at the entry-point layer, because it knows the domains: it
gives the runtime's worker (`operators.runtime.api.worker`) the extensions the catalog lists."""

from __future__ import annotations

import sys

from operators.catalog import API_EXTENSIONS
from operators.runtime.api.worker import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], API_EXTENSIONS))
