"""The code sandbox: correct verdicts, enforced limits, and hostile programs contained.

More hostile programs, each with the audit hook switched off, are in test_sandbox_attacks.py.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from curation.verify.sandbox import (
    FunctionalTest,
    Sandbox,
    SandboxError,
    SandboxLimits,
    StdioTest,
    UnsafeSandboxWarning,
)

SECRET = "cascade-test-secret-7f3a"


@pytest.fixture(scope="module")
def box():
    os.environ["CASCADE_SANDBOX_TEST_SECRET"] = SECRET  # the parent holds a secret
    limits = SandboxLimits(time_limit_s=5.0, memory_mb=256)
    with Sandbox(workers=2, limits=limits) as sandbox:
        yield sandbox
    os.environ.pop("CASCADE_SANDBOX_TEST_SECRET", None)


def test_stdio_whitespace_tolerant_and_wrong_output(box: Sandbox) -> None:
    program = "a, b = map(int, input().split())\nprint(a + b, a * b)\n"
    ok = box.run(program, [StdioTest("2 3\n", "5   6\n\n"), StdioTest("1 1", "2\n1")])
    assert ok.passed and ok.n_passed == 2
    wrong = box.run(program, [StdioTest("2 3", "5 7")])
    assert not wrong.passed
    assert wrong.outcomes[0].status == "failed" and "wrong output" in wrong.outcomes[0].detail


def test_stdin_read_styles_and_exit(box: Sandbox) -> None:
    tests = [StdioTest("1 2\n3\n", "6")]
    for program in (
        "import sys\nprint(sum(map(int, sys.stdin.read().split())))",
        "import sys\nprint(sum(map(int, sys.stdin.buffer.read().split())))",
        "print(sum(map(int, open(0).read().split())))",
        "import sys\nprint(6)\nsys.exit(0)",
    ):
        assert box.run(program, tests).passed, program


def test_functional_leetcode_style_and_compile_error(box: Sandbox) -> None:
    program = "class Solution:\n    def mid(self, head: Optional[ListNode]) -> int:\n"
    program += "        xs = []\n        while head: xs.append(head.val); head = head.next\n"
    program += "        return xs[len(xs) // 2]\n"
    test = FunctionalTest(
        "def check(candidate):\n    assert candidate(list_node([1, 2, 3])) == 2\n"
        "check(Solution().mid)\n"
    )
    assert box.run(program, [test]).passed
    failing = box.run(program.replace("// 2]", "// 2 - 1]"), [test])
    assert failing.outcomes[0].status == "failed"
    broken = box.run("def f(:\n", [test])
    assert not broken.passed and broken.compile_error and "SyntaxError" in broken.compile_error


def test_all_tests_run_when_not_stopping_on_failure(box: Sandbox) -> None:
    program = "n = int(input())\nwhile n == 2: pass\nprint(n)"
    tests = [StdioTest("1", "1"), StdioTest("2", "2"), StdioTest("3", "3")]
    limits = SandboxLimits(time_limit_s=1.0)
    result = box.run(program, tests, limits=limits, stop_on_failure=False)
    assert [o.status for o in result.outcomes] == ["passed", "timeout", "passed"]
    stopped = box.run(program, tests, limits=limits)
    assert [o.status for o in stopped.outcomes] == ["passed", "timeout", "not_run"]
    assert stopped.summary().startswith("test 2/3 timeout")


def _processes_of_uids(uids: list[int] | None) -> list[int]:
    """Processes running under a uid in [low, high) (a worker's private uids)."""
    if uids is None:
        return []
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if uids[0] <= entry.stat().st_uid < uids[1]:
                    pids.append(int(entry.name))
            except OSError:
                pass
    return pids


def test_hostile_programs_fail_cleanly_and_others_pass(box: Sandbox, tmp_path: Path) -> None:
    outside = tmp_path / "escaped.txt"
    hostile = {
        "fork_bomb": "import os\nwhile True:\n    os.fork()\n",
        "subprocess": "import subprocess\nsubprocess.run(['sh', '-c', 'sleep 100 &'])\n",
        "infinite_loop": "while True:\n    pass\n",
        "memory_hog": "blocks = []\nwhile True:\n    blocks.append(bytearray(50 * 2**20))\n",
        "write_outside": f"open({str(outside)!r}, 'w').write('x')\n",
        "socket": "import socket\nsocket.create_connection(('127.0.0.1', 22), timeout=1)\n",
        "output_flood": "while True:\n    print('y' * 4096)\n",
        "deep_recursion": "import sys\nsys.setrecursionlimit(10**9)\ndef f(n): return f(n + 1)\nf(0)\n",
    }
    good = ("print(int(input()) + 1)", [StdioTest("41", "42")])
    jobs = [good] + [(src, [StdioTest("", "")]) for src in hostile.values()] + [good]
    results = box.run_many(jobs)
    assert results[0].passed and results[-1].passed  # neighbours are untouched
    statuses = {}
    for name, result in zip(hostile, results[1:-1], strict=True):
        assert not result.passed, name
        assert result.harness_error is None, (name, result.harness_error)
        statuses[name] = result.outcomes[0].status
    assert statuses["infinite_loop"] == "timeout"
    assert statuses["memory_hog"] == "memory"
    assert statuses["output_flood"] == "output_limit"
    assert statuses["fork_bomb"] == "error"
    assert statuses["deep_recursion"] in ("error", "crashed", "timeout", "memory")
    for name in ("fork_bomb", "subprocess", "socket"):
        assert "PermissionError" in results[1 + list(hostile).index(name)].outcomes[0].detail
    # (the host's tmp_path does not exist in the jail)
    assert "FileNotFoundError" in results[1 + list(hostile).index("write_outside")].summary()
    assert not outside.exists()
    # /tmp inside the sandbox is the job's own tmpfs (so this write works), gone with the job
    write_tmp = "path = '/tmp/cascade-sandbox-escape'\nopen(path, 'w').write('x')\n"
    write_tmp += "print(open(path).read())"
    assert box.run(write_tmp, [StdioTest("", "x")]).passed
    assert not Path("/tmp/cascade-sandbox-escape").exists()
    # nothing left running under the workers' private uids
    for worker in box._workers:
        assert _processes_of_uids(worker.info["uids"]) == []
    # and the sandbox still works afterwards
    assert box.run(*good).passed


def test_secrets_of_the_parent_are_invisible(box: Sandbox) -> None:
    program = f"""
import os, glob
found = {SECRET!r} in str(dict(os.environ))
for path in glob.glob('/proc/*/environ'):
    try:
        found = found or {SECRET!r} in open(path, errors='replace').read()
    except Exception:
        pass
print('FOUND' if found else 'CLEAN')
"""
    assert SECRET in os.environ["CASCADE_SANDBOX_TEST_SECRET"]
    result = box.run(program, [StdioTest("", "CLEAN")])
    assert result.passed, result.summary()


def test_network_namespace_is_empty(box: Sandbox) -> None:
    assert box.network_isolation in ("netns", "userns+netns")
    # (no /proc in the jail: ask the kernel for the interfaces directly)
    program = "import socket\nprint(' '.join(name for _, name in socket.if_nameindex()))"
    result = box.run(program, [StdioTest("", "lo")])
    assert result.passed, result.summary()


def test_sandboxed_code_cannot_kill_the_host() -> None:
    # a sleeping host process outside the sandbox survives a program that tries to kill it
    victim = subprocess.Popen(["sleep", "30"])
    try:
        with Sandbox(workers=1) as box:
            program = f"import os, signal\nos.kill({victim.pid}, signal.SIGKILL)\n"
            result = box.run(program, [StdioTest("", "")])
        assert not result.passed and "PermissionError" in result.outcomes[0].detail
        assert victim.poll() is None
    finally:
        victim.kill()
        victim.wait()


def test_expected_output_is_not_in_the_sandbox_and_forged_passes_fail(box: Sandbox) -> None:
    expected = "EXPECTED-OUTPUT-7c1e9"
    snoop = """
import gc, sys
needle = 'EXPECTED-' + 'OUTPUT-7c1e9'  # a fresh object, never written whole in this source

def strings(obj, depth=0):
    if isinstance(obj, str):
        yield obj
    elif depth < 4 and isinstance(obj, dict):
        for value in list(obj.values()):
            yield from strings(value, depth + 1)
    elif depth < 4 and isinstance(obj, (list, tuple)):
        for value in list(obj):
            yield from strings(value, depth + 1)

roots = gc.get_objects()
frame = sys._getframe()
while frame is not None:
    roots.append(frame.f_locals)
    frame = frame.f_back
hits = [s for root in roots for s in strings(root) if s is not needle and needle in s]
print('found' if hits else 'none')
"""
    snooped = box.run(snoop, [StdioTest("", expected)])
    assert not snooped.passed and "got 'none" in snooped.outcomes[0].detail
    # control: the same snoop does find the string when it is in the sandbox (as the input)
    control = box.run(snoop, [StdioTest(expected, expected)])
    assert "got 'found" in control.outcomes[0].detail
    forge = """
import os, pickle, struct
for name in os.listdir('/proc/self/fd'):
    try:
        target = os.readlink('/proc/self/fd/' + name)
    except OSError:
        continue
    if target.startswith('pipe:'):
        frame = pickle.dumps(('done', 0, 'passed', '', 'forged'))
        os.write(int(name), struct.pack('<Q', len(frame)) + frame)
os._exit(0)
"""
    forged = box.run(forge, [StdioTest("", expected)])
    assert not forged.passed and forged.harness_error is None


def test_functional_tests_resist_always_equal_results_and_replaced_helpers(box: Sandbox) -> None:
    test = FunctionalTest(
        "def check(candidate):\n"
        "    assert candidate([1, 2]) == [2, 1]\n"
        "    assert is_same_list(candidate(None, linked=True), list_node([5]))\n"
        "check(Solution().f)\n"
    )
    always_equal = "class Eq:\n    def __eq__(self, other): return True\n    def __ne__(self, other): return False\n"
    hacks = {
        "object": always_equal + "class Solution:\n    def f(self, x, linked=False): return Eq()\n",
        "nested": always_equal
        + "class Solution:\n    def f(self, x, linked=False): return [Eq()]\n",
        "list_subclass": (
            "class L(list):\n    def __eq__(self, other): return True\n"
            "class Solution:\n    def f(self, x, linked=False): return L()\n"
        ),
        "in_a_node": always_equal
        + "class Solution:\n    def f(self, x, linked=False):\n"
        + "        return ListNode(Eq()) if linked else [2, 1]\n",
        "replaced_helper": (
            "is_same_list = lambda a, b: True\n"
            "class Solution:\n    def f(self, x, linked=False):\n"
            "        return ListNode(4) if linked else [2, 1]\n"
        ),
    }
    for name, program in hacks.items():
        result = box.run(program, [test])
        assert not result.passed, name
    honest = (
        "class L(list):\n    pass\n"
        "class Solution:\n    def f(self, x, linked=False):\n"
        "        return ListNode(5) if linked else L(x[::-1])\n"
    )
    assert box.run(honest, [test]).passed


def test_a_program_holds_no_descriptor_but_its_own(box: Sandbox) -> None:
    # two pipes, both its own (its job, its status: what it writes there is size-capped
    # JSON that can only fail it), no socket, no directory (a way out of the jail)
    program = """
import os, stat
kinds = []
for fd in range(1024):
    try:
        kinds.append(stat.S_IFMT(os.fstat(fd).st_mode))
    except OSError:
        pass
print(kinds.count(stat.S_IFIFO), kinds.count(stat.S_IFSOCK), kinds.count(stat.S_IFDIR))
"""
    result = box.run(program, [StdioTest("", "2 0 0")])
    assert result.passed, result.summary()


def test_a_worker_that_dies_is_reported_and_replaced() -> None:
    import signal
    import threading

    with Sandbox(workers=1, limits=SandboxLimits(time_limit_s=30.0)) as box:
        worker_pid = box._workers[0].info["pid"]
        uids = box._workers[0].info["uids"]
        timer = threading.Timer(1.0, os.kill, args=(worker_pid, signal.SIGKILL))
        timer.start()
        try:
            result = box.run("import time\ntime.sleep(20)", [StdioTest("", "")])
        finally:
            timer.cancel()
        assert result.harness_error == "sandbox worker died"
        assert box._workers[0].info["pid"] != worker_pid
        # the orphaned program died with its worker (it would otherwise sleep on)
        orphans = _processes_of_uids(uids)
        for _ in range(100):
            orphans = [pid for pid in orphans if Path(f"/proc/{pid}").exists()]
            if not orphans:
                break
            time.sleep(0.1)
        assert orphans == []
        assert box.run("print(2)", [StdioTest("", "2")]).passed
