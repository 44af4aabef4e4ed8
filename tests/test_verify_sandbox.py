"""The code sandbox: correct verdicts, enforced limits, and hostile programs contained.

More hostile programs, each with the audit hook switched off, are in test_sandbox_attacks.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from curation.verify.sandbox import (
    FunctionalTest,
    Sandbox,
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
    # nothing left running under the workers' private uids (killed as the job ends)
    for worker in box._workers:
        for _ in range(50):
            if not _processes_of_uids(worker.info["uids"]):
                break
            time.sleep(0.1)
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


# --------------------------------------------------------------------------- functional tests


def test_nodes_travel_as_data_and_in_place_changes_come_back(box: Sandbox) -> None:
    program = """
def reverse(head):
    prev = None
    while head:
        head.next, prev, head = prev, head, head.next
    return prev
def invert(root):
    if root:
        root.left, root.right = invert(root.right), invert(root.left)
    return root
def sort_in_place(nums, *, reverse=False):
    nums.sort(reverse=reverse)
def reorder(head):
    nodes = []
    while head:
        nodes.append(head)
        head = head.next
    i, j = 0, len(nodes) - 1
    while i < j:
        nodes[i].next = nodes[j]
        i += 1
        if i == j:
            break
        nodes[j].next = nodes[i]
        j -= 1
    nodes[i].next = None
def has_cycle(head):
    seen = set()
    while head and id(head) not in seen:
        seen.add(id(head))
        head = head.next
    return head is not None
def values():
    return (1, {2, 3}, {"a": [4.5, None]}, b"x", 10**30, -(2**70), frozenset({1}), 1 + 2j)
"""
    test = FunctionalTest(
        "def check(candidate):\n"
        "    head = list_node([1, 2, 3])\n"
        "    tail = head.next.next\n"
        "    assert candidate(head) is tail  # the same node comes back, not a copy\n"
        "    assert is_same_list(tail, list_node([3, 2, 1]))\n"
        "    assert is_same_tree(invert(tree_node([4, 2, 7, 1, 3])), tree_node([4, 7, 2, None, None, 3, 1]))\n"
        "    nums = [3, 1, 2]\n"
        "    assert sort_in_place(nums) is None and nums == [1, 2, 3]\n"
        "    sort_in_place(nums, reverse=True)\n"
        "    assert nums == [3, 2, 1]\n"
        "    head = list_node([1, 2, 3, 4])\n"
        "    reorder(head)\n"
        "    assert is_same_list(head, list_node([1, 4, 2, 3]))\n"
        "    loop = list_node([1, 2, 3])\n"
        "    loop.next.next.next = loop.next\n"
        "    assert has_cycle(loop) and not has_cycle(list_node([1]))\n"
        "    assert values() == (1, {2, 3}, {'a': [4.5, None]}, b'x', 10**30, -(2**70),"
        " frozenset({1}), 1 + 2j)\n"
        "check(reverse)\n"
    )
    result = box.run(program, [test])
    assert result.passed, result.summary()
    broken = box.run(program.replace("nums.sort(reverse=reverse)", "pass"), [test])
    assert not broken.passed and "assertion failed" in broken.summary()


def test_the_test_uses_the_program_s_helpers_and_sees_its_exceptions(box: Sandbox) -> None:
    # HumanEval: a test may call another function of the program's (encode_cyclic), and
    # expect an exception of the program's
    program = (
        "def encode(s):\n    return s[::-1]\n"
        "def decode(s):\n    return s[::-1]\n"
        "def positive(x):\n    if x < 0:\n        raise ValueError('negative')\n    return x\n"
        "class Oops(Exception):\n    pass\n"
        "def oops():\n    raise Oops('mine')\n"
    )
    test = FunctionalTest(
        "def check(candidate):\n"
        "    assert candidate(encode('abc')) == 'abc'\n"
        "    try:\n        positive(-1)\n    except ValueError as exc:\n"
        "        assert str(exc) == 'negative'\n    else:\n        assert False\n"
        "    try:\n        oops()\n    except Exception as exc:\n"
        "        assert 'Oops: mine' in str(exc)\n"
        "check(decode)\n"
    )
    result = box.run(program, [test])
    assert result.passed, result.summary()
    raising = box.run(
        program.replace("return s[::-1]\ndef positive", "return 1 / 0\ndef positive"), [test]
    )
    assert raising.outcomes[0].status == "error" and "ZeroDivisionError" in raising.summary()


def test_functional_limits_and_failures_keep_their_statuses(box: Sandbox) -> None:
    test = FunctionalTest("def check(candidate):\n    assert candidate(1) == 1\ncheck(f)\n")
    limits = SandboxLimits(time_limit_s=3.0, memory_mb=256, max_output_bytes=1 << 16)
    programs = {
        "def f(x):\n    while True:\n        pass\n": "timeout",
        "def f(x):\n    blocks = []\n    while True:\n        blocks.append(bytearray(50 << 20))\n": (
            "memory"
        ),
        "def f(x):\n    while True:\n        print('y' * 4096)\n": "output_limit",
        "def f(x):\n    import os\n    os._exit(3)\n": "crashed",
        "import sys\nsys.exit(0)\ndef f(x):\n    return x\n": "error",
        "def f(x):\n    return 2\n": "failed",
        "def f(x):\n    return x\n": "passed",
    }
    results = box.run_many([(p, [test]) for p in programs], limits=limits)
    statuses = [r.outcomes[0].status for r in results]
    assert statuses == list(programs.values()), [r.summary() for r in results]
    assert "exited with code 3" in results[3].summary()
    nondata = box.run("def f(x):\n    return object()\n", [test])
    assert "non-data value" in nondata.summary()
    with pytest.raises(ValueError, match="all StdioTest or all FunctionalTest"):
        box.run("print(1)", [StdioTest("", "1"), test])
    broken_test = box.run("def f(x):\n    return x\n", [FunctionalTest("def check(:\n")])
    assert broken_test.harness_error and "does not compile" in broken_test.harness_error


# --------------------------------------------------------------------------- without root


def _python_for_others() -> str | None:
    """An interpreter an unprivileged user can run with this tree on its path."""
    if os.geteuid() != 0:
        return None
    probe = "import subprocess, sys, curation.verify.sandbox\n"
    probe += "subprocess.run([sys.executable, '-c', ''], check=True)"
    for python in (os.path.realpath(sys.executable), os.path.realpath("/usr/bin/python3")):
        done = subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", python, "-c", probe],
            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
            capture_output=True,
        )
        if done.returncode == 0:
            return python
    return None


ROOT = Path(__file__).resolve().parents[1]
USERNS_SCRIPT = """
import json, os, sys
from curation.verify.sandbox import FunctionalTest, Sandbox, StdioTest
HOOK_OFF = "import sys\\nfor m in list(sys.modules.values()):\\n    getattr(m, '_BLOCKED_EVENTS', {}).clear()\\n"
test = FunctionalTest("def check(candidate):\\n    assert candidate([3, 1, 2]) == [1, 2, 3]\\ncheck(f)\\n")
attack = HOOK_OFF + '''
import ctypes, os, signal
libc = ctypes.CDLL(None, use_errno=True)
done = []
for pid in (1, os.getppid(), -1):  # the zygote and all: the last job shows they live
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
if libc.ptrace(16, 1, 0, 0) == 0:  # PTRACE_ATTACH to the zygote
    done.append("traced 1")
for path in (%r, "/etc/passwd", "/proc/1/environ"):
    try:
        open(path).read()
        done.append("read " + path)
    except OSError:
        pass
print(done)
''' % (os.getcwd() + "/README.md",)
with Sandbox(workers=1) as box:
    info = box._workers[0].info
    results = box.run_many([
        ("print(int(input()) * 2)", [StdioTest("21", "42")]),
        ("def f(xs): return sorted(xs)", [test]),
        (attack, [StdioTest("", "[]")]),
        ("print(int(input()) * 2)", [StdioTest("21", "42")]),
    ])
    print(json.dumps({"info": info, "results": [r.summary() for r in results]}))
"""


def test_an_unprivileged_user_gets_user_namespaces_and_the_same_boundary() -> None:
    python = _python_for_others()
    if python is None:
        pytest.skip("needs root, to run an interpreter as another, unprivileged user")
    done = subprocess.run(
        [
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            python,
            "-c",
            USERNS_SCRIPT,
        ],
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["info"]["isolation"] == "userns"
    assert report["results"] == ["passed 1/1"] * 4, report


def test_without_root_or_user_namespaces_the_sandbox_refuses_in_one_sentence() -> None:
    # nobody, inside a chroot: the kernel refuses it a user namespace
    python = _python_for_others()
    if python is None or shutil.which("unshare") is None or not Path("/mnt").is_dir():
        pytest.skip("needs root, unshare(1) and /mnt to take user namespaces away")
    script = (
        "import warnings\n"
        "from curation.verify.sandbox import Sandbox, SandboxError, StdioTest\n"
        "try:\n    Sandbox(workers=1)\nexcept SandboxError as exc:\n    print('refused:', exc)\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    with Sandbox(workers=1, unsafe_no_isolation=True) as box:\n"
        "        print(box.run('print(2)', [StdioTest('', '2')]).summary())\n"
        "print('warned:', caught[0].message)\n"
    )
    command = (
        "mount --rbind / /mnt && exec chroot --userspec=65534:65534 /mnt "
        f'env -i PATH=/usr/bin:/bin PYTHONPATH={ROOT} {python} -c "$0"'
    )
    done = subprocess.run(
        ["unshare", "-m", "sh", "-c", command, script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    refused = lines[0]
    assert refused.startswith("refused: the sandbox cannot isolate programs on this machine")
    assert "unsafe_no_isolation=True" in refused and refused.count(". ") == 0
    assert lines[1] == "passed 1/1"
    assert lines[2].startswith("warned: Sandbox(unsafe_no_isolation=True) runs programs without")


def test_the_unsafe_mode_must_be_asked_for_warns_and_still_judges() -> None:
    with pytest.warns(UnsafeSandboxWarning, match="signal and kill processes"):
        box = Sandbox(workers=1, unsafe_no_isolation=True)
    with box:
        assert box.network_isolation == "none"
        assert box.run("print(int(input()) * 2)", [StdioTest("21", "42")]).passed
        test = FunctionalTest("def check(candidate):\n    assert candidate(2) == 4\ncheck(f)\n")
        assert box.run("def f(x):\n    return x * 2\n", [test]).passed
        # the verdict still comes from the worker and the checker, never the program
        forge = "import sys\nsys.modules['builtins'].abs = lambda x: 0\ndef f(x):\n    return 0\n"
        assert not box.run(forge, [test]).passed
        socket = "import socket\nsocket.socket()\n"
        assert "PermissionError" in box.run(socket, [StdioTest("", "")]).summary()


def test_what_a_sandboxed_process_sends_decodes_to_plain_data_only() -> None:
    from curation.verify.plain_data import DataError, NotData, decode, encode
    from curation.verify.sandbox_prelude import prelude_namespace

    prelude = prelude_namespace("leetcode")
    classes = {"L": prelude["ListNode"], "T": prelude["TreeNode"]}
    value = [1, (2, 3.5), {"k": {4}}, b"\x00", None, True, 2**100, float("inf")]
    assert decode(json.loads(json.dumps(encode(value)))) == value
    long_list = prelude["list_node"](range(100_000))  # a long list nests nothing
    back = decode(json.loads(json.dumps(encode(long_list))), classes)
    assert type(back) is prelude["ListNode"] and back.next.next.val == 2

    class Eq:
        def __eq__(self, other: object) -> bool:
            return True

    with pytest.raises(NotData):
        encode([Eq()])
    for bad in (
        [["p", "cos\nsystem"], []],  # no pickle, no other tag
        [["n", 0], []],  # a node that is not there
        [["n", 0], [["L", 1, 7]]],  # a link out of range
        [["s", ["l"]], []],  # an unhashable set member
        [{"a": 1}, []],  # JSON objects are not values
        [["n", 0], [["L", 1, None]]],  # a node where the receiver has no node classes
    ):
        with pytest.raises(DataError):
            decode(bad)


def test_a_test_may_call_and_read_values_of_the_program_that_are_not_data(box: Sandbox) -> None:
    # Tests written without check(candidate): `assert Solution().f(1) == 2` builds an object of
    # the program's, reads its method and compares the method's (data) result in the checker.
    program = (
        "class Solution:\n    def f(self, x):\n        return x + 1\n"
        "    def g(self, x):\n        return Solution()\n"
    )
    tests = {
        "assert Solution().f(1) == 2": "passed",
        "assert Solution().f(1) == 3": "failed",
        # an object of the program's never decides an assertion: not by truth, not by ==
        "assert Solution()": "error",
        "assert Solution().g(1)": "error",
        "assert Solution().g(1) != 5": "error",
        "assert Solution().g(1) in [Solution()]": "error",
        "assert len(Solution()) == 0": "error",
        "assert Solution().h(1) == 2": "error",
    }
    results = box.run_many([(program, [FunctionalTest(t)]) for t in tests])
    statuses = {t: r.outcomes[0].status for t, r in zip(tests, results, strict=True)}
    assert statuses == tests, [r.summary() for r in results]
    assert "non-data value" in results[2].summary()
