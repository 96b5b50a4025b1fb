"""Docker HEALTHCHECK: healthy while the server answers 200 on /v2/health/ready."""

from __future__ import annotations

import os
import sys
import urllib.request


def main() -> int:
    url = f"http://127.0.0.1:{os.environ.get('PORT', '8000')}/v2/health/ready"
    try:
        with urllib.request.urlopen(url, timeout=4) as response:
            return 0 if response.status == 200 else 1
    except OSError:  # refused, timed out, or an HTTP error status such as 503
        return 1


if __name__ == "__main__":
    sys.exit(main())
