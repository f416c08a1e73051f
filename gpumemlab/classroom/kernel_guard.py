"""What the grader injects into a submission's kernel: a sandbox cell first, a wrapper per test.

The **startup cell** runs before any student code. It (1) installs an audit hook
(``sys.addaudithook``, which cannot be removed) that refuses to open, list, create or delete paths
outside the submission's folder, except reading the Python installation and the gpumemlab
package, and refuses to start processes; and (2) defines a trusted test runner: a class that
captured the real builtins, ``sys.path`` and a per-run secret key before the student's cells ran.

Each **test cell** is replaced by a one-line call that finds that runner from a literal
(``().__class__.__base__.__subclasses__()``, so names the student rebound cannot intercept it).
It first sends out the answers the grader asked for (``verdicts``): each answer name's value as
plain JSON data, or a function's outputs on the grader's inputs, in one display output of type
``text/x-gpumemlab-answers``. Those are judged outside, by the grader. Then it restores the
builtins, ``sys.path`` and a fresh ``gpumemlab``, runs the test's remaining statements (the
checks nbgrader-style cells make inside the submission) and on success raises
``GmlGraderPass(token)``, an HMAC of the test's id under the secret; the executor reads it from
the kernel's execute reply, never from printed text.

Everything here runs in the student's own process, so it is only a first line: the OS sandbox
(``isolation``) is what keeps the machine safe, and the outside judge is what keeps points
honest. A determined student can forge the *inside* checks (which is why cells that have only
those are reported "checked inside the submission"), never the outside judgement.
"""
from __future__ import annotations

import hashlib
import hmac
import os
import site
import sys
import sysconfig
from pathlib import Path

PASS_NAME = "GmlGraderPass"

# The setup code runs in a private globals dict holding a copy of the builtins, so that no name
# the student later rebinds in the notebook's namespace (exec, print, globals ...) reaches it.
_SETUP = r'''
def _gml_grader_setup(home, read_roots, list_roots, deny_roots, trusted_path, key, token,
                      imports):
    import builtins, hashlib, hmac, os, sys
    realpath, join, sep, getcwd, fspath = (os.path.realpath, os.path.join, os.sep, os.getcwd,
                                           os.fspath)
    stderr, PermissionError_ = sys.stderr, PermissionError
    home = realpath(home)
    read_roots = tuple(realpath(p) for p in read_roots)
    deny_roots = tuple(realpath(p) for p in deny_roots)
    list_roots = tuple(realpath(p) for p in list_roots)
    WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
    WRITES = {"os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.chmod", "os.chown",
              "os.link", "os.symlink", "os.truncate", "os.utime", "shutil.rmtree",
              "shutil.move", "shutil.copytree", "os.setxattr", "os.removexattr"}
    READS = {"os.listdir", "os.scandir", "os.chdir", "glob.glob", "os.listxattr",
             "os.getxattr"}
    SPAWNS = {"subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn",
              "os.fork", "os.forkpty", "pty.spawn", "os.kill", "os.killpg"}

    def inside(path, roots):
        return any(path == r or path.startswith(r + sep) for r in roots)

    def resolve(p):
        if isinstance(p, int) or p is None:
            return None
        p = fspath(p)
        if isinstance(p, bytes):
            p = p.decode("utf-8", "replace")
        return realpath(join(getcwd(), p))

    def refuse(what, path):
        msg = f"gpumemlab grader: {what} {path!r} is outside your submission folder"
        try:
            print("[gpumemlab sandbox] blocked:", what, path, file=stderr)
        except Exception:
            pass
        raise PermissionError_(msg)

    def check(path, write, listing=False):
        if path is None or inside(path, (home,)):
            return
        if inside(path, deny_roots) and not inside(path, read_roots):
            refuse("writing" if write else "reading", path)
        if write:
            if path != "/dev/null":
                refuse("writing", path)
        elif not (inside(path, read_roots) or (listing and path in list_roots)):
            refuse("reading", path)

    def hook(event, args):
        if event == "open":
            mode, flags = args[1], args[2] if len(args) > 2 else 0
            write = (isinstance(mode, str) and any(c in mode for c in "wax+")) or \
                (isinstance(flags, int) and bool(flags & WRITE_FLAGS))
            check(resolve(args[0]), write)
        elif event in WRITES:
            check(resolve(args[0]), True)
            if event in ("os.rename", "os.link", "os.symlink", "shutil.move",
                         "shutil.copytree") and len(args) > 1:
                check(resolve(args[1]), True)
        elif event in READS:
            check(resolve(args[0]), False, listing=True)
        elif event in SPAWNS:
            raise PermissionError_(f"gpumemlab grader: {event} is not allowed while grading")

    pristine = dict(builtins.__dict__)
    modules = sys.modules
    from json import dumps, loads
    from IPython.display import publish_display_data
    publish = publish_display_data
    ANSWERS_MIME = "text/x-gpumemlab-answers"

    class Refused(Exception):
        pass

    class Pass(Exception):
        pass
    Pass.__name__ = Pass.__qualname__ = "GmlGraderPass"

    def plain(x, budget, depth=0):
        """The answer as JSON-able data of the exact builtin types; anything else refused."""
        budget[0] -= 1
        if budget[0] < 0 or depth > 40:
            raise Refused("the answer is too large or too deeply nested")
        t = type(x)
        if x is None or t is bool or t is str:
            return x
        if t is int:
            if x.bit_length() > 256:
                raise Refused("an integer answer with more than 256 bits")
            return x
        if t is float:
            if x != x or x in (float("inf"), float("-inf")):
                raise Refused(f"{x!r} is not a finite number")
            return x
        if t is list or t is tuple:
            return [plain(v, budget, depth + 1) for v in x]
        if t is dict:
            if any(type(k) is not str for k in x):
                raise Refused("a dict answer needs str keys")
            return {k: plain(v, budget, depth + 1) for k, v in x.items()}
        np = modules.get("numpy")   # a numpy scalar counts as the value .item() gives,
        if np is not None and isinstance(x, getattr(np, "generic", ())):   # checked again
            return plain(x.item(), budget, depth + 1)
        raise Refused(f"an object of type {t.__module__}.{t.__qualname__} is not plain data: "
                      f"give a plain int, float, str, bool, list or dict")

    def describe(exc):
        try:
            return f"{type(exc).__name__}: {exc}"[:300]
        except BaseException:
            return type(exc).__name__

    def answer(ns, request):
        name, probes = request["name"], request["probes"]
        if name not in ns:
            return {"ok": False, "error": f"NameError: name {name!r} is not defined"}
        value = ns[name]
        try:
            if request.get("call_if_callable") and callable(value):
                try:
                    value = value()
                except (Exception, SystemExit) as exc:
                    return {"ok": False, "error": f"your code raised {describe(exc)}"}
            if probes is None:
                return {"ok": True, "value": plain(value, [100000])}
            if not callable(value):
                return {"ok": False, "error": f"expected a function {request['signature']}, got "
                                              f"{type(value).__name__}"}
            calls = []
            for args in loads(dumps(probes)):   # the student's own copy of the inputs
                try:
                    calls.append({"value": plain(value(*args), [100000])})
                except Refused as exc:
                    calls.append({"error": f"a wrong kind of result: {exc}"})
                    break
                except (Exception, SystemExit) as exc:
                    calls.append({"error": describe(exc)})
                    break
            return {"ok": True, "calls": calls}
        except Refused as exc:
            return {"ok": False, "error": str(exc)}

    def run(grade_id, source, requests):
        ns = sys._getframe(1).f_globals   # the notebook namespace the wrapper cell runs in
        sys.settrace(None)
        sys.setprofile(None)
        for name, value in pristine.items():
            if builtins.__dict__.get(name) is not value:
                setattr(builtins, name, value)
        if requests:
            replies = [answer(ns, r) for r in loads(requests)]
            publish({ANSWERS_MIME: dumps(replies)})
        sys.path[:] = trusted_path
        for name in [m for m in list(modules) if m == "gpumemlab" or m.startswith("gpumemlab.")]:
            del modules[name]
        if source.strip():
            test_ns = {k: v for k, v in ns.items() if k not in pristine}
            test_ns["__builtins__"] = pristine
            test_ns["__name__"] = "__main__"
            exec(compile(imports, "<gpumemlab imports>", "exec"), test_ns)
            exec(compile(source, f"<test {grade_id}>", "exec"), test_ns)
        raise Pass(hmac.new(key, grade_id.encode(), hashlib.sha256).hexdigest())

    runner = type("_GmlGrader_" + token, (), {"run": staticmethod(run)})
    sys.dont_write_bytecode = True
    sys.addaudithook(hook)
    return runner


# kept alive by this private dict, which the audit hook's globals reference
RUNNER = _gml_grader_setup(**KW)
'''

_STARTUP = ('# gpumemlab grader: sandbox and trusted test runner (injected; runs before any student '
            'cell)\n'
            'exec(compile({setup!r}, "<gpumemlab grader>", "exec"), '
            '{{"__builtins__": dict(__import__("builtins").__dict__), "KW": {kwargs}}})\n')

_WRAPPER = ('# gpumemlab grader: test cell {grade_id!r} ({points:g} points): its checks that run '
            'inside the submission, and the answers judged outside\n'
            '[c for c in ().__class__.__base__.__subclasses__() if c.__name__ == '
            '"_GmlGrader_{token}"][0].run({grade_id!r}, {source!r}, {requests!r})\n')
ANSWERS_MIME = "text/x-gpumemlab-answers"


def pass_token(key: bytes, grade_id: str) -> str:
    return hmac.new(key, grade_id.encode(), hashlib.sha256).hexdigest()


def library_roots(kit) -> list:
    """Folders a kernel must read to import Python, numpy, torch, matplotlib and the kit."""
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix}
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        path = sysconfig.get_paths().get(key)
        if path:
            roots.add(path)
    roots.update(site.getsitepackages() if hasattr(site, "getsitepackages") else [])
    user = site.getusersitepackages() if hasattr(site, "getusersitepackages") else None
    if user:
        roots.add(user)
    roots.add(str(kit))
    # Shared system data some libraries read (fonts, time zones, CPU info); no user files.
    roots.update(p for p in ("/usr/lib", "/usr/lib64", "/usr/share", "/lib", "/lib64",
                             "/etc/fonts", "/etc/localtime", "/proc/self", "/proc/cpuinfo",
                             "/sys/devices/system/cpu", "/dev/null", "/dev/urandom")
                 if os.path.exists(p))
    return sorted(roots)


def trusted_sys_path(kit) -> list:
    """The kernel's import path: the student kit first (so that copy is the one imported).
    A kit with a view of the packages (an unprivileged run: ``unprivileged.site_view``) is
    the whole path: the kit, then the view, then the standard library."""
    view = os.path.join(str(kit), "site")
    if os.path.isdir(view):
        std = [p for p in sys.path if p and os.path.isdir(p) and "-packages" not in p
               and os.path.realpath(p).startswith(os.path.realpath(sys.base_prefix) + os.sep)]
        return [str(kit), view] + std
    roots = [os.path.realpath(r) for r in library_roots(kit) if r != str(kit)]
    rest = [p for p in sys.path if p and os.path.isdir(p)
            and any(os.path.realpath(p) == r or os.path.realpath(p).startswith(r + os.sep)
                    for r in roots)]
    return [str(kit)] + rest


def startup_source(home, deny_roots, key: bytes, token: str, imports: str, kit) -> str:
    reads = library_roots(kit)
    path = trusted_sys_path(kit)
    # Listing (names only) is allowed on the ancestors of readable folders, so that the import
    # system can scan sys.path entries such as a source checkout holding the package.
    listable = set()
    for root in reads + path:
        p = Path(root)
        listable.update(str(a) for a in [p, *p.parents])
    kwargs = dict(home=str(home), read_roots=reads, list_roots=sorted(listable),
                  deny_roots=[str(d) for d in deny_roots], trusted_path=path, key=key,
                  token=token, imports=imports)
    return _STARTUP.format(setup=_SETUP, kwargs=repr(kwargs))


def wrapper_source(grade_id: str, points: float, source: str, token: str, requests=()) -> str:
    import json

    return _WRAPPER.format(grade_id=grade_id, points=points, source=source, token=token,
                           requests=json.dumps(list(requests)) if requests else "")
