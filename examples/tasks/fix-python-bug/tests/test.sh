#!/bin/bash
cd /app && python3 - <<'PY'
import sys
sys.path.insert(0, "/app")
from stats import median
cases = [([3, 1, 2], 2), ([4, 1, 3, 2], 2.5), ([5], 5), ([1, 2], 1.5), ([7, 7, 1, 9, 3, 3], 5.0)]
ok = all(abs(median(values) - want) < 1e-9 for values, want in cases)
print("PASS" if ok else "FAIL", [(v, median(v)) for v, _ in cases])
open("/logs/verifier/reward.txt", "w").write("1\n" if ok else "0\n")
PY
[ -s /logs/verifier/reward.txt ] || echo 0 > /logs/verifier/reward.txt
