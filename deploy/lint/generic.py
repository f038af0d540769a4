"""checkov, run once over a tree of files, its failed checks as findings by file: the self-test
runs it once over the patched files of all the fixtures that name a checkov check (one start of
checkov, not one per fixture). `.ci/deploy-lint` runs checkov's own command on the real files."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

from . import Finding

FRAMEWORKS = {"aws": "cloudformation", "k8s": "kubernetes"}


def checkov(directory: pathlib.Path, framework: str) -> dict[pathlib.Path, list[Finding]]:
    """The failed checks of every file under `directory`, by file (resolved path)."""
    env = dict(os.environ, BC_SKIP_MAPPING="TRUE", CKV_SKIP_PACKAGE_UPDATE_CHECK="TRUE")
    exe = pathlib.Path(sys.executable).with_name("checkov")
    proc = subprocess.run(
        [str(exe), "--quiet", "--skip-download", "--framework", framework, "-d", str(directory), "-o", "json"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"checkov failed ({proc.returncode}): {proc.stderr[-2000:]}")
    reports = json.loads(proc.stdout or "[]")
    reports = reports if isinstance(reports, list) else [reports]
    out: dict[pathlib.Path, list[Finding]] = {}
    for report in reports:
        for check in (report.get("results") or {}).get("failed_checks") or []:
            path = (directory / check["file_path"].lstrip("/")).resolve()
            resource = check.get("resource", "")
            out.setdefault(path, []).append(Finding(check["check_id"], f"{resource}: {check['check_name']}"))
        if (report.get("summary") or {}).get("parsing_errors"):
            raise RuntimeError(f"checkov could not parse files under {directory}")
    return out
