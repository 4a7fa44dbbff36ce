# A python application for devhook's push tests: it prints its input, its
# arguments and the value of its bundled dependency as the run's output;
# the input {"fail": "why"} makes it write why on standard error and exit 1.
import json
import sys

import devhook_dep

data = json.load(sys.stdin)
if isinstance(data, dict) and "fail" in data:
    print("about to fail", file=sys.stderr)
    print(data["fail"], file=sys.stderr)
    sys.exit(1)
print("pushed app: running with", sys.argv[1:], file=sys.stderr)
print(json.dumps({
    "options": {},
    "solution": {"input": data, "args": sys.argv[1:], "dep": devhook_dep.VALUE},
    "metrics": {},
}))
