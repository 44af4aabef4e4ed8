"""Hostile programs against the sandbox: none may pass, hurt the host or reach a later job.

Each attack is what a policy under RL could learn if it worked (reward hacking). Most first
switch the audit hook off (one line from inside, it is a second line, not the boundary) and
then use the operating system directly: the namespaces, the jail, the private uids and the
rlimits must hold on their own. A stdio attack's expected output is what the attack would
print if it worked, so "not passed" means it did not.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from curation.verify.sandbox import FunctionalTest, Sandbox, SandboxLimits, StdioTest

ROOT = Path(__file__).resolve().parents[1]
SECRET = "cascade-attack-secret-2b7d"
PROJECT_SECRET = "in-the-project-" + "4b1f9e"  # the attack reads it from this file

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="inspects other processes as root")

# switch the audit hook off: empty the tables it reads (wherever they live)
HOOK_OFF = """
import sys as _s
for _m in list(_s.modules.values()):
    for _n in ("_BLOCKED_EVENTS", "_PATH_EVENTS"):
        _t = getattr(_m, _n, None)
        if isinstance(_t, (dict, set)):
            _t.clear()
"""
LIBC = "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"

TWO_SUM = FunctionalTest(
    "def check(candidate):\n"
    "    assert candidate(nums = [2,7,11,15], target = 9) == [0,1]\n"
    "    assert candidate(nums = [3,2,4], target = 6) == [1,2]\n"
    "\n\ncheck(Solution().twoSum)"
)
WRONG_TWO_SUM = "class Solution:\n    def twoSum(self, nums, target):\n        return [0, 0]\n"
GOOD = ("print(int(input()) + 1)", [StdioTest("41", "42")])


@pytest.fixture(scope="module")
def box():
    os.environ["CASCADE_SANDBOX_TEST_SECRET"] = SECRET  # the parent holds a secret
    limits = SandboxLimits(time_limit_s=3.0, memory_mb=256)
    with Sandbox(workers=2, limits=limits) as sandbox:
        yield sandbox
    os.environ.pop("CASCADE_SANDBOX_TEST_SECRET", None)


@pytest.fixture
def one_worker():
    """A single worker, so that consecutive jobs surely run on the same one."""
    with Sandbox(workers=1, limits=SandboxLimits(time_limit_s=3.0, memory_mb=256)) as sandbox:
        yield sandbox


def _worker_pids(box: Sandbox) -> list[int]:
    return [w.info["pid"] for w in box._workers]


def _still_sound(box: Sandbox, pids: list[int]) -> None:
    """The workers survived, and honest programs still pass."""
    assert _worker_pids(box) == pids, "a worker died"
    assert all(r.passed for r in box.run_many([GOOD] * len(pids)))
    honest = "class Solution:\n    def twoSum(self, nums, target):\n"
    honest += "        return next([i, j] for j in range(len(nums)) for i in range(j)"
    honest += " if nums[i] + nums[j] == target)\n"
    assert box.run(honest, [TWO_SUM]).passed


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rpartition(")")[2].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def _descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        for child in _children(todo.pop()):
            out.append(child)
            todo.append(child)
    return out


def _sandboxed_processes(box: Sandbox) -> list[int]:
    """Processes below the workers that run under another uid than the workers' (but for
    a worker's long-lived checker)."""
    found = []
    for worker in box._workers:
        checker = worker.info.get("checker_uid")
        for child in _descendants(worker.info["pid"]):
            try:
                uid = os.stat(f"/proc/{child}").st_uid
            except OSError:
                continue
            if uid not in (os.geteuid(), checker):
                found.append(child)
    return found


def _memory_holds(pid: int, needle: bytes) -> bool:
    """Whether any private writable mapping of `pid` holds `needle` (read as root)."""
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", 0) as mem:
        for line in maps:
            fields = line.split()
            if "rw" not in fields[1] or (len(fields) > 5 and fields[5].startswith("[v")):
                continue
            start, end = (int(x, 16) for x in fields[0].split("-"))
            try:
                mem.seek(start)
                if needle in mem.read(end - start):
                    return True
            except (OSError, ValueError, OverflowError):
                continue
    return False


def _run(box: Sandbox, program: str, tests: list, **kwargs):
    result = box.run(program, tests, **kwargs)
    assert result.harness_error is None, result.harness_error
    return result


# --------------------------------------------------------------------------- reading answers


def test_reading_the_project_does_not_find_the_answer(box: Sandbox) -> None:
    program = (
        HOOK_OFF
        + f"""
import re
try:
    text = open({str(Path(__file__))!r}).read()
    found = re.search('^PROJECT_SECRET = "(.*?)" [+] "(.*?)"', text, re.M).groups()
    print("".join(found))
except Exception as exc:
    print(type(exc).__name__)
"""
    )
    result = _run(box, program, [StdioTest("", PROJECT_SECRET)])
    assert not result.passed, "read the expected output from the project's tests/"
    assert "FileNotFoundError" in result.outcomes[0].detail


def test_reading_the_input_jsonl_does_not_find_the_answer(box: Sandbox, shared_data: Path) -> None:
    source = (shared_data / "sources" / "leetcode_train.jsonl").resolve()
    program = (
        HOOK_OFF
        + f"""
import ast, json, re
class Solution:
    def twoSum(self, nums, target):
        for line in open({str(source)!r}):
            test = json.loads(line)["tests"]["functional"]
            for call, want in re.findall(r"candidate\\((.*?)\\) == (.*)", test):
                if eval("dict(" + call + ")") == dict(nums=nums, target=target):
                    return ast.literal_eval(want)
"""
    )
    result = _run(box, program, [TWO_SUM])
    assert not result.passed, "read the expected values from the input file"
    assert "FileNotFoundError" in result.outcomes[0].detail


def test_a_shell_through_posixsubprocess_finds_nothing(box: Sandbox) -> None:
    # _posixsubprocess.fork_exec raises no audit event: the hook never sees it
    pattern = r's/^PROJECT_SECRET = "\(.*\)" + "\([0-9a-f]*\)".*/\1\2/p'
    command = f"sed -n '{pattern}' {Path(__file__)}"
    program = f"""
import _posixsubprocess, os
r, w = os.pipe()
er, ew = os.pipe()
try:
    _posixsubprocess.fork_exec(
        [b"/bin/sh", b"-c", {command.encode()!r}], [b"/bin/sh"], True, (w, ew), None, None,
        -1, -1, -1, w, -1, -1, er, ew, False, False, -1, None, None, None, -1, None, False)
    os.close(w)
    os.close(ew)
    print(os.read(er, 100).decode() or os.read(r, 100).decode().strip() or "nothing")
except Exception as exc:
    print(type(exc).__name__, exc)
"""
    result = _run(box, program, [StdioTest("", PROJECT_SECRET)])
    assert not result.passed, "a shell read the answer from the project"


def test_the_expected_output_digest_cannot_be_brute_forced(box: Sandbox) -> None:
    # a small answer space (YES/NO, small numbers) and a digest in memory give the answer away
    program = """
import gc, hashlib, sys
digests = set()
frame = sys._getframe()
while frame is not None:
    for value in list(frame.f_locals.values()):
        if isinstance(value, dict):
            digests.update(v for v in value.values() if isinstance(v, str) and len(v) == 64)
    frame = frame.f_back
for obj in gc.get_objects():
    if isinstance(obj, dict) and "output_digest" in obj:
        digests.add(obj["output_digest"])
for guess in ["YES", "NO"] + [str(n) for n in range(10000)]:
    if hashlib.sha256(guess.encode()).hexdigest() in digests:
        print(guess)
        break
else:
    print("unknown")
"""
    result = _run(box, program, [StdioTest("", "7291")])
    assert not result.passed, "recovered the expected output from its digest"


@needs_root
def test_no_expected_value_is_in_the_program_s_memory(box: Sandbox) -> None:
    """White-box: while the program runs, its process holds neither this job's expected
    values nor an earlier job's test code; the supervisor does (the scan works)."""
    earlier, now, stdio = (f"marker-{uuid.uuid4().hex}" for _ in range(3))
    first = FunctionalTest(
        f"def check(candidate):\n    assert candidate() == {earlier!r}\ncheck(f)\n"
    )
    assert not box.run("def f(): return 1", [first]).passed
    # made when the program runs, so only the program's process holds it
    tag = f"program-{uuid.uuid4().hex}"
    make_tag = f"tag = ''.join(reversed({tag[::-1]!r}))\n"
    program = f"import time\n{make_tag}def f():\n    time.sleep(2.5)\n    return 0\n"
    test = FunctionalTest(f"def check(candidate):\n    assert candidate() == {now!r}\ncheck(f)\n")
    stdio_program = f"import time\n{make_tag}time.sleep(2.5)\n"
    import threading

    results = []
    runner = threading.Thread(
        target=lambda: results.extend(
            box.run_many([(program, [test]), (stdio_program, [StdioTest("", stdio)])])
        )
    )
    runner.start()
    try:
        time.sleep(1.2)
        holders = [pid for pid in _sandboxed_processes(box) if _memory_holds(pid, tag.encode())]
        assert len(holders) >= 2, "found no program process to inspect"
        for pid in holders:
            assert not _memory_holds(pid, now.encode()), "this job's expected value"
            assert not _memory_holds(pid, earlier.encode()), "an earlier job's test code"
            assert not _memory_holds(pid, stdio.encode()), "the expected stdout"
        supervisors = [p for p in _worker_pids(box) if _memory_holds(p, now.encode())]
        assert supervisors, "the scan does find what a supervisor holds"
    finally:
        runner.join()
    assert not any(r.passed for r in results)


# --------------------------------------------------------------------------- forging a verdict


FORGE_FRAMES = """
import json, os, pickle, struct
frames = []
for i in range(4):
    for message in (("done", i, "passed", "", None), ("done", i, "passed", "", "")):
        data = pickle.dumps(message)
        frames.append(struct.pack("<Q", len(data)) + data)
    for message in ({"k": "end", "i": i, "s": "passed", "d": ""}, {"k": "end", "i": i, "s": "ok"},
                    {"k": "ready"}, {"k": "ok", "v": [[["l", 0, 1], None, {}], []]}):
        data = json.dumps(message).encode()
        frames.append(struct.pack("<I", len(data)) + data)
for fd in range(3, 256):
    for frame in frames:
        try:
            os.write(fd, frame)
        except OSError:
            pass
"""


def test_forged_frames_on_every_descriptor_do_not_pass_a_functional_test(box: Sandbox) -> None:
    for ending in ("os._exit(0)", "", "import time\ntime.sleep(10)"):
        program = FORGE_FRAMES + ending + "\n" + WRONG_TWO_SUM
        result = _run(box, program, [TWO_SUM])
        assert not result.passed, f"a forged frame passed ({ending!r})"


def test_forged_frames_do_not_pass_a_stdio_test(box: Sandbox) -> None:
    result = _run(box, FORGE_FRAMES + "os._exit(0)\n", [StdioTest("", "forged")])
    assert not result.passed


def test_a_pickle_frame_runs_no_code_in_the_supervisor(box: Sandbox) -> None:
    # unpickling what the child wrote would run this in the (root) worker
    program = (
        """
import os, pickle, struct
class Payload:
    def __reduce__(self):
        return (eval, ("('done', 0, 'passed', '', None)",))
data = pickle.dumps(Payload())
for fd in range(3, 256):
    try:
        os.write(fd, struct.pack("<Q", len(data)) + data)
    except OSError:
        pass
os._exit(0)
"""
        + WRONG_TWO_SUM
    )
    pids = _worker_pids(box)
    result = _run(box, program, [TWO_SUM])
    assert not result.passed, "code ran in the supervisor and forged a pass"
    _still_sound(box, pids)


def test_replacing_the_test_through_frames_does_not_pass(box: Sandbox) -> None:
    program = (
        """
import sys
frame = sys._getframe()
while frame is not None:
    for value in list(frame.f_locals.values()):
        if isinstance(value, dict) and "compiled" in value:
            value["compiled"] = compile("pass", "<test>", "exec")
        if isinstance(value, list):
            for item in value:
                if isinstance(item, dict) and "code" in item:
                    item["code"] = "pass"
                    item["compiled"] = compile("pass", "<test>", "exec")
    frame = frame.f_back
"""
        + WRONG_TWO_SUM
    )
    assert not _run(box, program, [TWO_SUM]).passed


def test_patching_the_result_guard_does_not_pass(box: Sandbox) -> None:
    program = """
import sys
for module in list(sys.modules.values()):
    for name in ("check_plain_result", "_overrides_comparison"):
        if hasattr(module, name):
            setattr(module, name, lambda *a, **k: None)
class Eq:
    def __eq__(self, other): return True
    def __ne__(self, other): return False
class Solution:
    def twoSum(self, nums, target):
        return Eq()
"""
    assert not _run(box, program, [TWO_SUM]).passed


def test_patching_builtins_and_modules_does_not_pass(box: Sandbox) -> None:
    checks = [
        "math.isclose(candidate(9.0), 3.0)",
        "all(candidate(x * x) == x for x in range(1, 4))",
        "sorted(candidate(4.0) for _ in range(2)) == [2.0, 2.0]",
        "len(str(candidate(2.0))) > 5 and str(candidate(4.0)) == '2.0'",
    ]
    program = (
        "import builtins, math\n"
        "builtins.all = lambda xs: True\n"
        "builtins.sorted = lambda xs: [2.0, 2.0]\n"
        "builtins.str = lambda x: '2.0' if x == 0 else '1.41421'\n"
        "math.isclose = lambda *a, **k: True\n"
        "def root(x):\n    return 0\n"
    )
    for check in checks:
        test = FunctionalTest(
            f"import math\ndef check(candidate):\n    assert {check}\ncheck(root)\n"
        )
        assert not _run(box, program, [test]).passed, check
        assert _run(box, "def root(x):\n    return x ** 0.5\n", [test]).passed, check


def test_a_node_that_hides_an_always_equal_value_does_not_pass(box: Sandbox) -> None:
    # today's guard walks at most a million items: a big field hides the value behind it
    test = FunctionalTest(
        "def check(candidate):\n"
        "    assert is_same_list(candidate(list_node([1])), list_node([5]))\n"
        "check(Solution().f)\n"
    )
    program = """
class Eq:
    def __eq__(self, other): return True
    def __ne__(self, other): return False
class Solution:
    def f(self, head):
        node = ListNode(Eq())
        node.junk = [0] * 1_100_000
        return node
"""
    assert not _run(box, program, [test]).passed


def test_exiting_before_the_asserts_does_not_pass(box: Sandbox) -> None:
    for exit_call in ("import sys\nsys.exit(0)", "import os\nos._exit(0)", "raise SystemExit"):
        program = WRONG_TWO_SUM + exit_call + "\n"
        assert not _run(box, program, [TWO_SUM]).passed, exit_call
        inside = WRONG_TWO_SUM.replace("return [0, 0]", exit_call.replace("\n", "; "))
        assert not _run(box, inside, [TWO_SUM]).passed, exit_call


def test_overriding_exit_functions_does_not_pass(box: Sandbox) -> None:
    program = (
        "import os, sys\n"
        "sys.exit = lambda *a: None\nos._exit = lambda *a: None\n"
        "import builtins\nbuiltins.exit = builtins.quit = lambda *a: None\n"
    )
    pids = _worker_pids(box)
    assert not _run(box, program + WRONG_TWO_SUM, [TWO_SUM]).passed
    assert not _run(box, program + "print('forged')", [StdioTest("", "right")]).passed
    _still_sound(box, pids)


def test_printing_what_a_pass_looks_like_does_not_pass(box: Sandbox) -> None:
    program = (
        "print('passed')\nprint('All tests passed')\nprint('Issue reproduced')\n"
        "print('True')\n" + WRONG_TWO_SUM
    )
    assert not _run(box, program, [TWO_SUM]).passed


# --------------------------------------------------------------------------- hurting others


def test_killing_the_checker_and_the_worker_does_nothing(box: Sandbox) -> None:
    program = (
        HOOK_OFF
        + """
import os, signal
for target in [os.getppid(), -1] + list(range(1, 32768)):
    if target != os.getpid():
        try:
            os.kill(target, signal.SIGKILL)
        except OSError:
            pass
"""
        + WRONG_TWO_SUM
    )
    pids = _worker_pids(box)
    victim = subprocess.Popen(["sleep", "30"])
    try:
        assert not _run(box, program, [TWO_SUM]).passed
        assert not _run(box, program, [StdioTest("", "x")]).passed
        assert victim.poll() is None, "a host process was killed"
    finally:
        victim.kill()
        victim.wait()
    _still_sound(box, pids)


def test_reading_proc_of_the_parent_finds_no_secret(box: Sandbox) -> None:
    # dir_fd hides the path from the audit hook's check
    program = (
        HOOK_OFF
        + f"""
import os
found = []
for pid in [os.getppid()] + [int(p) for p in os.listdir("/proc") if p.isdigit()]:
    try:
        d = os.open(f"/proc/{{pid}}", os.O_RDONLY)
        for name in ("environ", "cmdline", "mem"):
            try:
                fd = os.open(name, os.O_RDONLY, dir_fd=d)
                data = os.read(fd, 1 << 16)
                found.append(name)
                if {SECRET!r}.encode() in data:
                    print({SECRET!r})
                    raise SystemExit
            except OSError:
                pass
    except OSError:
        pass
print("nothing", found[:3])
"""
    )
    result = _run(box, program, [StdioTest("", SECRET)])
    assert not result.passed, "read the parent's secret"


def test_ptrace_and_proc_mem_of_the_supervisor_fail(box: Sandbox) -> None:
    program = (
        HOOK_OFF
        + LIBC
        + """
import os
ppid = os.getppid()
attached = libc.ptrace(16, ppid, 0, 0)  # PTRACE_ATTACH
errors = [ctypes.get_errno()]
try:
    with open(f"/proc/{ppid}/mem", "rb") as mem:
        print("read", len(mem.read(16)))
except OSError as exc:
    errors.append(exc.errno)
print("attached" if attached == 0 else "refused", errors)
"""
    )
    pids = _worker_pids(box)
    result = _run(box, program, [StdioTest("", "attached")])
    assert not result.passed
    assert "refused" in result.outcomes[0].detail
    _still_sound(box, pids)


def test_fork_bombs_and_sleepers_are_contained_and_cleaned_up(box: Sandbox) -> None:
    fork_bomb = (
        HOOK_OFF
        + "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    )
    sleeper = HOOK_OFF + (
        "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(60)\ntime.sleep(60)\n"
    )
    daemon = (
        HOOK_OFF
        + "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(60)\nprint(1)\n"
    )
    pids = _worker_pids(box)
    started = time.monotonic()
    results = box.run_many(
        [(p, [StdioTest("", "0")]) for p in (fork_bomb, sleeper, daemon)],
        limits=SandboxLimits(time_limit_s=2.0, memory_mb=256),
    )
    assert time.monotonic() - started < 30
    assert not any(r.passed for r in results)
    assert results[1].outcomes[0].status == "timeout"
    for _ in range(50):
        if not _sandboxed_processes(box):
            break
        time.sleep(0.1)
    assert _sandboxed_processes(box) == [], "processes of a finished job are still running"
    _still_sound(box, pids)


def test_floods_of_output_and_of_the_result_pipe_are_cut(box: Sandbox) -> None:
    flood_pipes = (
        """
import os, struct
chunk = b"x" * (1 << 20)
for fd in range(3, 64):
    try:
        os.fstat(fd)
    except OSError:
        continue
    for header in (struct.pack("<Q", 1 << 40), struct.pack("<I", (1 << 32) - 1)):
        try:
            os.write(fd, header)
            for _ in range(150):
                os.write(fd, chunk)
        except OSError:
            pass
"""
        + WRONG_TWO_SUM
    )
    stderr_flood = "import sys\nwhile True:\n    sys.stderr.write('e' * 65536)\n"
    pids = _worker_pids(box)
    before = _peak_memory_kb(pids)
    result = _run(box, flood_pipes, [TWO_SUM])
    assert not result.passed
    assert not _run(box, flood_pipes, [StdioTest("", "x")]).passed
    assert _run(box, stderr_flood, [StdioTest("", "x")]).outcomes[0].status == "timeout"
    grown = max(a - b for a, b in zip(_peak_memory_kb(pids), before, strict=True))
    assert grown < 64 * 1024, f"a worker buffered {grown} kB of a flood"
    _still_sound(box, pids)


def _peak_memory_kb(pids: list[int]) -> list[int]:
    peaks = []
    for pid in pids:
        status = Path(f"/proc/{pid}/status").read_text()
        peaks.append(int(re.search(r"VmHWM:\s+(\d+)", status).group(1)))
    return peaks


def test_a_huge_or_deep_result_is_a_failure_not_a_crash(box: Sandbox) -> None:
    for value in (
        "'x' * (200 << 20)",
        "__import__('functools').reduce(lambda a, _: [a], range(100000), [])",
        "[[0] * 1000 for _ in range(20000)]",
    ):
        program = f"class Solution:\n    def twoSum(self, nums, target):\n        return {value}\n"
        result = _run(box, program, [TWO_SUM])
        assert not result.passed, value
        assert result.outcomes[0].status in ("error", "memory", "failed", "timeout"), value


# --------------------------------------------------------------------------- leaving traces


def test_nothing_written_in_one_job_is_seen_by_the_next(one_worker: Sandbox) -> None:
    marker = f"left-{uuid.uuid4().hex[:12]}"
    write = (
        HOOK_OFF
        + f"""
import os
for directory in ("/tmp", "/var/tmp", "/dev/shm", os.getcwd(), os.path.expanduser("~")):
    try:
        d = os.open(directory, os.O_RDONLY)
        fd = os.open("cascade-left", os.O_WRONLY | os.O_CREAT, 0o666, dir_fd=d)
        os.write(fd, {marker!r}.encode())
        print(directory)
    except OSError as exc:
        print(directory, exc)
"""
    )
    read = """
import os
for directory in ("/tmp", "/var/tmp", "/dev/shm", os.getcwd(), os.path.expanduser("~")):
    try:
        print(open(os.path.join(directory, "cascade-left")).read())
        break
    except OSError:
        pass
else:
    print("nothing")
"""
    first = one_worker.run(write, [StdioTest("", "")])
    assert first.harness_error is None
    second = one_worker.run(read, [StdioTest("", marker)])
    assert not second.passed, "a file of the previous job was still there"


def test_ipc_objects_and_keys_do_not_outlive_their_job(one_worker: Sandbox) -> None:
    marker = uuid.uuid4().hex[:16]
    key = 0x5CA5CADE
    write = (
        HOOK_OFF
        + LIBC
        + f"""
libc.shmat.restype = ctypes.c_void_p
shm = libc.shmget({key}, 4096, 0o1666)
if shm >= 0:
    address = libc.shmat(shm, None, 0)
    if address not in (None, ctypes.c_void_p(-1).value):
        ctypes.memmove(address, {marker!r}.encode(), 16)
libc.syscall(248, b"user", b"cascade-left", {marker!r}.encode(), 16, -4)  # add_key
"""
    )
    read = (
        HOOK_OFF
        + LIBC
        + f"""
libc.shmat.restype = ctypes.c_void_p
found = "nothing"
shm = libc.shmget({key}, 4096, 0o666)
if shm >= 0:
    address = libc.shmat(shm, None, 0)
    if address not in (None, ctypes.c_void_p(-1).value):
        found = ctypes.string_at(address, 16).decode(errors="replace")
serial = libc.syscall(250, 10, -4, b"user", b"cascade-left", 0)  # keyctl(SEARCH)
if serial > 0:
    buffer = ctypes.create_string_buffer(64)
    size = libc.syscall(250, 11, serial, buffer, 64)  # keyctl(READ)
    found = buffer.raw[:16].decode(errors="replace")
print(found)
"""
    )
    first = one_worker.run(write, [StdioTest("", "")])
    assert first.harness_error is None
    second = one_worker.run(read, [StdioTest("", marker)])
    assert not second.passed, "shared memory or a key of the previous job was still there"


def test_no_host_path_is_writable(box: Sandbox, tmp_path: Path) -> None:
    name = f"cascade-attack-{uuid.uuid4().hex[:8]}"
    targets = ["/run/lock", "/var/tmp", "/dev/shm", "/tmp", str(ROOT), str(tmp_path)]
    program = (
        HOOK_OFF
        + f"""
import os
for directory in {targets!r}:
    try:
        d = os.open(directory, os.O_RDONLY)
        os.close(os.open({name!r}, os.O_WRONLY | os.O_CREAT, 0o666, dir_fd=d))
    except OSError:
        pass
"""
    )
    _run(box, program, [StdioTest("", "")])
    written = [d for d in targets if Path(d, name).exists()]
    for d in written:
        Path(d, name).unlink()
    assert written == [], f"wrote on the host in {written}"


def test_signalling_a_host_process_fails(box: Sandbox) -> None:
    victim = subprocess.Popen(["sleep", "30"])
    try:
        program = HOOK_OFF + f"import os, signal\nos.kill({victim.pid}, signal.SIGKILL)\n"
        result = _run(box, program, [StdioTest("", "")])
        assert not result.passed
        assert victim.poll() is None, "the host process was killed"
    finally:
        victim.kill()
        victim.wait()
    assert signal.SIGKILL  # (kept for readability of the program above)


def test_the_network_is_unreachable_with_the_hook_off(box: Sandbox) -> None:
    program = (
        HOOK_OFF
        + """
import socket
try:
    socket.create_connection(("1.1.1.1", 53), timeout=1)
    print("connected")
except OSError as exc:
    print("refused", exc)
"""
    )
    result = _run(box, program, [StdioTest("", "connected")])
    assert not result.passed


def test_the_sandbox_sees_no_project_lake_or_host_files(box: Sandbox, shared_data: Path) -> None:
    # The Python installation is bound read-only at its own path, so its parents exist: with
    # the venv inside the project (what `make setup` makes), the project directory exists in
    # the jail, holding that venv and nothing else.
    paths = [str(ROOT / "tests"), str(ROOT / "README.md"), str(ROOT / "curation")]
    paths += [str(shared_data), "/etc/passwd", "/etc/shadow"]
    paths += ["/proc/self", "/home", "/var", "/run", "/sys", "/usr/bin", "/bin/sh"]
    venv = Path(sys.prefix)
    inside = venv.name if venv.parent == ROOT else None
    program = (
        HOOK_OFF
        + f"""
import os
seen = [p for p in {paths!r} if os.path.exists(p)]
root = {str(ROOT)!r}
extra = sorted(set(os.listdir(root)) - {{{inside!r}}}) if os.path.isdir(root) else []
print(seen, extra)
"""
    )
    result = _run(box, program, [StdioTest("", "[] []")])
    assert result.passed, result.outcomes[0].detail
