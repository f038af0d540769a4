#!/usr/bin/env python3
"""tilegate's own policy check of deploy/ (run by .ci/deploy-lint); the rules are the package
deploy/lint/ (see its __init__.py). `--self-test` also proves every fixture in tests/ is
refused by the rule it names."""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from lint.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
