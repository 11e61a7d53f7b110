#!/usr/bin/env python3
"""Print svclab manifests that reproduce an upstream kube-proxy case file.

python3 scripts/case_manifests.py tests/data/kube-proxy/cases/TestOverallIPTablesRules.yaml > m.yaml
svclab rules -f m.yaml --node test-node --restore-input
"""

from __future__ import annotations

import sys

import yaml
from upstream_cases import case_yaml

if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: case_manifests.py CASE.yaml")
    with open(sys.argv[1]) as f:
        sys.stdout.write(case_yaml(yaml.safe_load(f)))
