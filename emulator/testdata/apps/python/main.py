# The python application of devhook's emulator tests. Its input's "mode"
# says what it does: ok (the default) prints its input, arguments and
# process facts as the run's output; fail writes lines on standard error
# and exits 3; sleep starts a child process and sleeps; once sleeps like
# sleep the first time (it leaves the file "marker" behind) and prints its
# output the next; flood prints without end; silent exits 0 printing
# nothing; escape starts a child that calls setsid() and a daemon made by
# a double fork, each writing its pid to a file in "dir", then writes its
# own pid to "dir"/parent and sleeps.
import json
import os
import subprocess
import sys
import time

raw = sys.stdin.read()
try:
    data = json.loads(raw)
except ValueError:
    data = {"text": raw}
mode = data.get("mode", "ok") if isinstance(data, dict) else "ok"
args = sys.argv[1:]
options = {args[i].lstrip("-"): args[i + 1] for i in range(0, len(args) - 1, 2)}

if mode == "fail":
    for i in range(20):
        print(f"line {i}", file=sys.stderr)
    print("boom: the solver gave up", file=sys.stderr)
    sys.exit(3)
if mode == "once":
    if not os.path.exists(data["marker"]):
        open(data["marker"], "w").close()
        mode = "sleep"
if mode == "sleep":
    child = subprocess.Popen(["sleep", "1000"])
    print(f"started pid={os.getpid()} child={child.pid}", file=sys.stderr, flush=True)
    time.sleep(1000)
if mode == "escape":
    def write(name, pid):
        tmp = os.path.join(data["dir"], name + ".tmp")
        with open(tmp, "w") as f:
            f.write(str(pid))
        os.rename(tmp, os.path.join(data["dir"], name))
    if os.fork() == 0:
        os.setsid()  # out of the run's process group and session
        write("child", os.getpid())
        time.sleep(1000)
        os._exit(0)
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:  # its parent exits at once: an orphan
            write("daemon", os.getpid())
            time.sleep(1000)
        os._exit(0)
    while not all(os.path.exists(os.path.join(data["dir"], n)) for n in ("child", "daemon")):
        time.sleep(0.01)
    write("parent", os.getpid())
    time.sleep(1000)
if mode == "flood":
    line = "x" * 65535 + "\n"
    while True:
        sys.stdout.write(line)
if mode == "silent":
    sys.exit(0)

try:
    import devhook_dep
    dep = devhook_dep.VALUE
except ImportError:
    dep = None
print("python app: read", len(raw), "bytes", file=sys.stderr)
print(json.dumps({
    "options": options,
    "solution": {"input": data, "args": args, "cwd": os.getcwd(), "pid": os.getpid(),
                 "pgid": os.getpgid(0), "dep": dep},
    "metrics": {"bytes_read": len(raw)},
}))
